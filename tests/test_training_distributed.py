"""Training on several processes: 2 CPU processes (gloo) launched by `torchrun` and `accelerate launch`
train the tiny models of the four trainers; the loss history and the exported weights equal a
one-process run with the same global batch, a 2-process run resumes, only the main process writes, and
a process count that does not divide the batch is refused with a clear message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import editlens
from editlens.errors import InputError
from editlens.training.distributed import Processes, check_divides, choose_share

ROOT = Path(editlens.__file__).resolve().parents[1]
TIMEOUT = 900


def _env() -> dict[str, str]:
    # the children import this checkout, compute on one thread each (2 processes on 2 cores) and keep the
    # test's dtype choice ($EDITLENS_DTYPE)
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                                                               "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    return env


def _run(prefix: list[str], args: list[str], expect: int | None = 0, **env: str) -> subprocess.CompletedProcess:
    """Run ``python PREFIX ARGS``; ``expect`` its exit status (``None``: any failure)."""
    r = subprocess.run([sys.executable, *prefix, *args], env={**_env(), **env}, capture_output=True, text=True,
                       timeout=TIMEOUT, cwd=str(ROOT))
    ok = r.returncode != 0 if expect is None else r.returncode == expect
    assert ok, (r.returncode, r.stdout[-3000:], r.stderr[-6000:])
    return r


ONE = ["-m", "editlens.cli.main"]
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "editlens.cli.main"]
ACCELERATE = ["-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1", "--cpu",
              "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "editlens.cli.main"]


def _losses(out: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if "loss" in r]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v.float() for k, v in load_file(str(path)).items()}


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


# -- the rules, in one process ---------------------------------------------------------------------

def test_shares_and_refusals():
    two = Processes(rank=1, world=2)
    assert [Processes(r, 3).share(7) for r in range(3)] == [slice(0, 3), slice(3, 5), slice(5, 7)]
    assert two.share(1) == slice(1, 1)  # a process may have no share of a tiny batch
    assert choose_share(3, 4, two) == "micro-batches" and choose_share(4, 3, two) == "examples"
    with pytest.raises(InputError, match=r"--batch-size 3 x --grad-accum 1 does not split among 2 processes"):
        choose_share(3, 1, two)
    with pytest.raises(InputError, match=r"--batch-size 5 does not split among 2 processes"):
        check_divides(5, "--batch-size", two)
    check_divides(5, "--batch-size", Processes())  # one process takes anything


# -- the loop itself, on a toy task ----------------------------------------------------------------

_TOY = '''
import json, os, signal, sys, torch
from editlens.models.precision import decide
from editlens.training import LoopSettings, TrainingTask, run
from editlens.training.distributed import current

class Toy(TrainingTask):
    """A two-layer net (with dropout unless the processes share each micro-batch); a micro-batch is 3 rows.
    Plain SGD: a gradient off by a factor would show in the weights (Adam would hide it)."""
    def __init__(self):
        torch.manual_seed(0)
        drop = 0.0 if SHARE == "gather" else 0.3
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(drop), torch.nn.Linear(8, 1))
        g = torch.Generator().manual_seed(1)
        self.x, self.y = torch.randn(60, 4, generator=g), torch.randn(60, 1, generator=g)
    def optimizer(self, params):  # $ADAM: AdamW, whose state FSDP shards
        return torch.optim.AdamW(params, lr=0.05) if os.environ.get("ADAM") else torch.optim.SGD(params, lr=0.1)
    def batch(self, step, micro):
        if step == int(os.environ.get("SIGTERM_MAIN_AT", -1)) and current().main and not getattr(self, "sent", 0):
            self.sent = os.kill(os.getpid(), signal.SIGTERM) or 1  # the main process alone is told to stop
        return [(step * 12 + micro * 3 + i) % 60 for i in range(3)]
    def loss(self, rows):
        if SHARE == "gather":  # each process its share of the rows (2 + 1), the outputs gathered
            mine = rows[current().share(len(rows))]
            out = current().gather_rows(self.model(self.x[mine]))
            return torch.nn.functional.mse_loss(out, self.y[rows]), {"rows": float(len(mine))}
        return torch.nn.functional.mse_loss(self.model(self.x[rows]), self.y[rows]), {"rows": float(len(rows))}
    def export(self, result):
        torch.save(self.model.state_dict(), result.out / "weights.pt")
        return {"weights": str(result.out / "weights.pt")}

out, steps, SHARE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = run(Toy(), LoopSettings(out=out, steps=steps, precision=decide("float32", "cpu", "training"), grad_accum=4,
                              max_grad_norm=float(os.environ.get("CLIP", 0)), sharding=os.environ.get("SHARDING"),
                              share="examples" if SHARE == "gather" else SHARE, plot=None, progress=False))
print("RESULT", current().rank, json.dumps({"losses": [r["loss"] for r in res.rows], "out": res.outputs}))
sys.exit(res.exit_code)
'''


def test_the_loop_on_two_processes_equals_one_and_resumes(tmp_path):
    script = tmp_path / "toy.py"
    script.write_text(_TOY)
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    _run([], [str(script), str(tmp_path / "one"), "4", "micro-batches"])
    # SIGTERM reaches the main process during step 2: both processes finish that step, agree to stop, the
    # main one saves a checkpoint, and each exits 143
    first = _run(torchrun, [str(script), str(tmp_path / "two"), "4", "micro-batches"], expect=None,
                 SIGTERM_MAIN_AT="1")
    assert first.stdout.count("interrupted at step 2") == 1
    assert [p.name for p in (tmp_path / "two" / "checkpoints").iterdir()] == ["step-0000002"]
    resumed = _run(torchrun, [str(script), str(tmp_path / "two"), "4", "micro-batches"])
    # every process ends with the same history; the log and the console lines are written once
    results = [json.loads(line.split(" ", 2)[2]) for line in resumed.stdout.splitlines() if line.startswith("RESULT")]
    assert len(results) == 2 and results[0] == results[1]
    assert "resumed from" in resumed.stdout and resumed.stdout.count("resumed from") == 1
    assert first.stdout.count("step     1/4") == 1
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(two) == 4 and two == pytest.approx(one, rel=1e-6)  # dropout included: micro-batches are seeded
    a = torch.load(tmp_path / "one" / "weights.pt")
    b = torch.load(tmp_path / "two" / "weights.pt")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["backend"] == "gloo" and summary["resumed_from"] == 2
    # rows is each process's micro-batch size: the mean over the processes of 3 rows each
    assert all(r["rows"] == 3.0 for r in map(json.loads, (tmp_path / "two" / "log.jsonl").read_text().splitlines()))
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()) == ["step-0000002", "step-0000004"]

    # sharing each micro-batch's rows unevenly (2 + 1 of 3) and gathering the outputs with their gradients:
    # every process computes the whole micro-batch's loss, and the update is one process's
    _run([], [str(script), str(tmp_path / "gather-one"), "3", "gather"])
    _run(torchrun, [str(script), str(tmp_path / "gather-two"), "3", "gather"])
    assert _losses(tmp_path / "gather-two") == pytest.approx(_losses(tmp_path / "gather-one"), rel=1e-6)
    a = torch.load(tmp_path / "gather-one" / "weights.pt")
    b = torch.load(tmp_path / "gather-two" / "weights.pt")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    rows = [r["rows"] for r in map(json.loads, (tmp_path / "gather-two" / "log.jsonl").read_text().splitlines())]
    assert rows == [1.5, 1.5, 1.5]  # the mean over the processes of the rows each computed


def test_the_loop_sharded_with_fsdp_equals_one_process_and_resumes(tmp_path):
    """FSDP2 over 2 gloo processes (both Linear layers sharded, AdamW state sharded, gradients clipped):
    torchrun --sharding fsdp stopped by SIGTERM after step 2, resumed by `accelerate launch --use_fsdp`;
    the loss history and the exported (whole) weights are one process's."""
    script = tmp_path / "toy.py"
    script.write_text(_TOY)
    env = {"ADAM": "1", "CLIP": "0.5", "FSDP_TRANSFORMER_CLS_TO_WRAP": "Linear"}
    _run([], [str(script), str(tmp_path / "one"), "4", "micro-batches"], **env)
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    first = _run(torchrun, [str(script), str(tmp_path / "two"), "4", "micro-batches"], expect=None,
                 SIGTERM_MAIN_AT="1", SHARDING="fsdp", **env)
    assert first.stdout.count("interrupted at step 2") == 1
    # the checkpoint is whole: every trainable tensor and AdamW moment at its full shape
    state = torch.load(tmp_path / "two" / "checkpoints" / "step-0000002" / "state.pt", weights_only=True)
    assert {k: tuple(v.shape) for k, v in state["trainable"].items()} == {
        "0.weight": (8, 4), "0.bias": (8,), "2.weight": (1, 8), "2.bias": (1,)}
    assert [tuple(s["exp_avg"].shape) for s in state["optimizer"]["state"].values()] == [(8, 4), (8,), (1, 8), (1,)]
    accelerate = ["-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
                  "--mixed_precision", "no", "--dynamo_backend", "no", "--use_fsdp", "--fsdp_version", "2",
                  "--fsdp_transformer_layer_cls_to_wrap", "Linear"]
    resumed = _run(accelerate, [str(script), str(tmp_path / "two"), "4", "micro-batches"],
                   CUDA_VISIBLE_DEVICES="", ADAM="1", CLIP="0.5")
    assert resumed.stdout.count("resumed from") == 1
    assert _losses(tmp_path / "two") == pytest.approx(_losses(tmp_path / "one"), rel=1e-6)
    a = torch.load(tmp_path / "one" / "weights.pt")
    b = torch.load(tmp_path / "two" / "weights.pt")
    assert all(type(b[k]) is torch.Tensor and torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["sharding"] == "fsdp" and summary["fsdp_units"] == 2 and summary["processes"] == 2


def test_fsdp_choice_and_refusals(monkeypatch):
    from editlens.training.fsdp import chosen_sharding, layer_classes, shard

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("FSDP_TRANSFORMER_CLS_TO_WRAP", raising=False)
    assert chosen_sharding(None) == "ddp" and chosen_sharding("FSDP") == "fsdp"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # accelerate launch --use_fsdp
    assert chosen_sharding(None) == "fsdp" and chosen_sharding("ddp") == "ddp"
    with pytest.raises(InputError, match="sharding must be one of ddp, fsdp, got 'zero3'"):
        chosen_sharding("zero3")
    from editlens.models.precision import decide

    precision = decide("float32", "cpu", "training")
    net = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert layer_classes(net) == [] and shard(net, Processes(), precision) is None  # one process: nothing to shard
    with pytest.raises(InputError, match=r"Sequential has no transformer layers .*--sharding ddp"):
        shard(net, Processes(0, 2), precision)
    monkeypatch.setenv("FSDP_TRANSFORMER_CLS_TO_WRAP", "Linear, Conv2d")
    assert layer_classes(net) == ["Linear", "Conv2d"]
    net.register_buffer("q", torch.zeros(1))
    net[0].register_parameter("packed", torch.nn.Parameter(torch.zeros(2, dtype=torch.uint8), requires_grad=False))
    with pytest.raises(InputError, match="cannot shard 4-bit / 8-bit quantised base weights"):
        shard(net, Processes(0, 2), precision)


# -- the four trainers -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dice_setup(tmp_path_factory):  # type: ignore[no-untyped-def]
    from helpers import write_dice_records

    from editlens.testing.tiny_dice import build_trainable_idefics3

    root = tmp_path_factory.mktemp("dice-dist")
    (root / "data").mkdir()
    return build_trainable_idefics3(root / "base"), write_dice_records(root / "data")


def _dice_args(dice_setup) -> list[str]:  # type: ignore[no-untyped-def]
    base, data = dice_setup
    return ["dice-train", "--stage", "detect", "--data", str(data / "train.jsonl"), "--base", str(base),
            "--steps", "3", "--batch-size", "2", "--lr", "1e-2", "--rank", "8", "--dropout", "0.1",
            "--save-every", "2", "--device", "cpu", "--no-progress", "--json"]


@pytest.fixture(scope="module")
def dice_one(dice_setup, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The one-process run the several-process ones are compared with."""
    out = tmp_path_factory.mktemp("dice-one") / "one"
    _run(ONE, [*_dice_args(dice_setup), "--out", str(out)])
    return out


@pytest.mark.slow
def test_dice_train_on_two_processes_equals_one(dice_setup, dice_one, tmp_path):
    args = _dice_args(dice_setup)
    r = _run(TORCHRUN, [*args, "--out", str(tmp_path / "two")])
    assert r.stdout.count('"steps_done"') == 1  # one report, the main process's
    one, two = _losses(dice_one), _losses(tmp_path / "two")
    assert len(one) == 3 and np.isfinite(one).all()
    # each process accumulates whole examples, seeded by (seed, step, example): the same computation
    assert two == pytest.approx(one, rel=1e-6, abs=1e-7)
    adapter = "adapter/adapter_model.safetensors"
    assert _max_diff(_weights(dice_one / adapter), _weights(tmp_path / "two" / adapter)) <= 1e-6
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["processes"] == 2

    # a process count that does not divide the batch is refused before anything loads
    bad = _run(TORCHRUN, [*args, "--batch-size", "3", "--out", str(tmp_path / "bad")], expect=1)
    assert "--batch-size 3 does not split among 2 processes" in bad.stdout + bad.stderr
    assert not (tmp_path / "bad" / "checkpoints").exists()


@pytest.mark.slow
def test_dice_train_sharded_with_fsdp_equals_one(dice_setup, dice_one, tmp_path):
    """--sharding fsdp: the decoder layers (with their LoRA adapters) sharded over 2 gloo processes; the loss
    history, the checkpoint's adapter and the exported adapter equal one process's, and the exported adapter
    is whole: it loads with peft's from_pretrained."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    r = _run(TORCHRUN, [*_dice_args(dice_setup), "--sharding", "fsdp", "--out", str(tmp_path / "two")])
    assert r.stdout.count('"steps_done"') == 1
    one, two = _losses(dice_one), _losses(tmp_path / "two")
    assert len(two) == 3 and two == pytest.approx(one, rel=1e-6, abs=1e-7)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["sharding"] == "fsdp" and summary["fsdp_units"] >= 1 and summary["processes"] == 2
    for adapter in ("adapter", "checkpoints/step-0000002/adapter"):
        path = f"{adapter}/adapter_model.safetensors"
        assert _max_diff(_weights(dice_one / path), _weights(tmp_path / "two" / path)) <= 1e-6
    base = AutoModelForImageTextToText.from_pretrained(str(dice_setup[0]))
    model = PeftModel.from_pretrained(base, str(tmp_path / "two" / "adapter"))
    trained = _weights(tmp_path / "two" / "adapter" / "adapter_model.safetensors")
    loaded = [v.float() for k, v in model.state_dict().items() if "lora_" in k]
    assert len(loaded) == len(trained) > 0
    assert sorted(float(v.norm()) for v in loaded) == pytest.approx(sorted(float(v.norm()) for v in trained.values()))


@pytest.fixture(scope="module")
def tune_setup(tmp_path_factory):  # type: ignore[no-untyped-def]
    from editlens.editors.random_init import make_tiny_editor
    from editlens.testing.tiny_tuning import make_relabelled

    root = tmp_path_factory.mktemp("tune-dist")
    return (make_tiny_editor(root / "base", "instruct-pix2pix", image_size=16),
            make_relabelled(root / "data"))


def _tune_args(tune_setup, *extra: str) -> list[str]:  # type: ignore[no-untyped-def]
    base, data = tune_setup
    return ["adiee", "tune-editor", str(data), "--base", str(base), "--resolution", "16", "--lr", "1e-3",
            "--conditioning-dropout", "0.2", "--save-every", "1", "--device", "cpu", "--no-progress", *extra]


@pytest.mark.slow
def test_tune_editor_on_two_processes_equals_one_and_resumes(tune_setup, tmp_path):
    """--batch-size 2 --grad-accum 2 on 2 processes: each computes one whole micro-batch; a run of 2
    steps (accelerate launch) resumed to 3 (torchrun) equals 3 steps in one process."""
    args = _tune_args(tune_setup, "--batch-size", "2", "--grad-accum", "2")
    _run(ONE, [*args, "--steps", "3", "--out", str(tmp_path / "one")])
    _run(ACCELERATE, [*args, "--steps", "2", "--out", str(tmp_path / "two")])
    assert len(_losses(tmp_path / "two")) == 2
    r = _run(TORCHRUN, [*args, "--steps", "3", "--out", str(tmp_path / "two")])
    assert r.stdout.count("resumed from") == 1 and r.stdout.count("editor: ") == 1
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(two) == 3 and two == pytest.approx(one, rel=1e-6, abs=1e-7)
    unet = "editor/unet/diffusion_pytorch_model.safetensors"
    w1, w2 = _weights(tmp_path / "one" / unet), _weights(tmp_path / "two" / unet)
    assert _max_diff(w1, w2) <= 1e-6
    card = json.loads((tmp_path / "two" / "editor" / "editlens_editor.json").read_text())
    assert card["source"]["trained_steps"] == 3
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["resumed_from"] == 2


@pytest.mark.slow
def test_tune_editor_shares_each_micro_batch_with_the_same_noise(tune_setup, tmp_path):
    """--batch-size 2 --grad-accum 1 on 2 processes: one example each; every sample's noise, timestep
    and dropout come from its own generator, so the first step's loss is the one-process loss and the
    run stays with it (batch-size-1 kernels round differently from batch-size-2 ones)."""
    args = _tune_args(tune_setup, "--batch-size", "2", "--steps", "3")
    _run(ONE, [*args, "--out", str(tmp_path / "one")])
    _run(TORCHRUN, [*args, "--out", str(tmp_path / "two")])
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    bf16 = json.loads((tmp_path / "one" / "summary.json").read_text())["precision"]["dtype"] != "float32"
    assert two[0] == pytest.approx(one[0], rel=1e-3 if bf16 else 1e-5)
    assert two == pytest.approx(one, rel=2e-2 if bf16 else 1e-3)
    unet = "editor/unet/diffusion_pytorch_model.safetensors"
    base = _weights(Path(tune_setup[0]) / "unet" / "diffusion_pytorch_model.safetensors")
    w1, w2 = _weights(tmp_path / "one" / unet), _weights(tmp_path / "two" / unet)
    moved = torch.cat([(w1[k] - base[k]).reshape(-1) for k in w1]).norm()
    apart = torch.cat([(w1[k] - w2[k]).reshape(-1) for k in w1]).norm()
    assert float(apart) < (0.5 if bf16 else 0.1) * float(moved), (float(apart), float(moved))


@pytest.fixture(scope="module")
def adiee_setup(tmp_path_factory):  # type: ignore[no-untyped-def]
    from PIL import Image

    from editlens.models.random_init import BUILDERS

    root = tmp_path_factory.mktemp("adiee-dist")
    (root / "data" / "images").mkdir(parents=True)
    rows = []
    for i in range(6):
        src = np.random.default_rng(i).integers(0, 256, (16, 16, 3), dtype=np.uint8)
        edt = src if i % 2 == 0 else 255 - src
        Image.fromarray(src).save(root / "data" / "images" / f"s{i}.png")
        Image.fromarray(edt).save(root / "data" / "images" / f"e{i}.png")
        rows.append({"id": f"x{i}", "source": f"images/s{i}.png", "edited": f"images/e{i}.png",
                     "instruction": "invert the colours", "score": 0.0 if i % 2 == 0 else 1.0, "split": "train"})
    (root / "data" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return BUILDERS["llava_next"](root / "base"), root / "data"


@pytest.mark.slow
def test_adiee_train_on_two_processes(adiee_setup, tmp_path):
    from editlens.adiee.checkpoint import load_scorer

    base, data = adiee_setup
    args = ["adiee", "train", "--data", str(data), "--base", str(base), "--steps", "2", "--batch-size", "1",
            "--grad-accum", "2", "--lr", "5e-3", "--image-side", "32", "--lora-dropout", "0.05", "--val-every", "0",
            "--save-every", "1", "--device", "cpu", "--no-progress"]
    _run(ONE, [*args, "--out", str(tmp_path / "one")])
    r = _run(TORCHRUN, [*args, "--out", str(tmp_path / "two")])
    assert r.stdout.count("checkpoint (ours layout)") == 1
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(two) == 2 and np.isfinite(two).all()
    assert two == pytest.approx(one, rel=1e-6, abs=1e-7)  # whole micro-batches: LoRA dropout included
    a, _, _ = load_scorer(tmp_path / "one" / "scorer", device="cpu")
    b, rep, _ = load_scorer(tmp_path / "two" / "scorer", device="cpu")
    assert rep.missing == []
    sa, sb = a.score_decoder.state_dict(), b.score_decoder.state_dict()
    assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


@pytest.fixture(scope="module")
def twoframe_setup(tmp_path_factory):  # type: ignore[no-untyped-def]
    from helpers import rng_image
    from PIL import Image

    from editlens.models.random_init import build_clip

    root = tmp_path_factory.mktemp("twoframe-dist")
    rows = []
    for k in range(10):
        src = rng_image(200 + k, 32, 32)
        edt = src.copy()
        edt[4:20, 4:20] = (230, 20, 20) if k % 2 else (20, 40, 230)
        Image.fromarray(src).save(root / f"s{k}.png")
        Image.fromarray(edt).save(root / f"e{k}.png")
        rows.append({"id": f"e{k}", "source": f"s{k}.png", "edited": f"e{k}.png",
                     "instruction": f"add a {'red' if k % 2 else 'blue'} square number {k}"})
    (root / "edits.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return build_clip(root / "base"), root / "edits.jsonl"


@pytest.mark.slow
def test_twoframe_train_on_two_processes_gathers_the_batch(twoframe_setup, tmp_path):
    """LoRA on the towers: each process encodes its share of a batch (4 of 8, then 1 of the last 2),
    the features are gathered with their gradients, and every process computes the whole batch's loss."""
    from editlens.twoframe.model import load_twoframe

    base, manifest = twoframe_setup
    args = ["twoframe", "train", str(manifest), "--model", str(base), "--tune", "lora:2", "--epochs", "2",
            "--batch-size", "8", "--lr", "1e-3", "--val-fraction", "0", "--device", "cpu", "--no-progress",
            "--json"]
    _run(ONE, [*args, "--out", str(tmp_path / "one")])
    r = _run(TORCHRUN, [*args, "--out", str(tmp_path / "two")])
    assert r.stdout.count('"first_epoch_loss"') == 1
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(two) == 4 and np.isfinite(two).all()
    # float32: the same to rounding; bfloat16 kernels on 4 + 4 (and 1 + 1) rows round unlike 8 (and 2)
    bf16 = json.loads((tmp_path / "one" / "summary.json").read_text())["precision"]["dtype"] != "float32"
    assert two[0] == pytest.approx(one[0], rel=1e-3 if bf16 else 1e-6)
    assert two == pytest.approx(one, rel=2e-2 if bf16 else 1e-5)
    model = load_twoframe(tmp_path / "two" / "model", device="cpu")
    ref = load_twoframe(tmp_path / "one" / "model", device="cpu")
    start = load_twoframe(base, device="cpu")
    sa, sb, s0 = ({k: v.detach() for k, v in m.clip.named_parameters()} for m in (ref, model, start))
    moved = torch.cat([(sa[k] - s0[k]).reshape(-1) for k in sa]).norm()
    apart = torch.cat([(sa[k] - sb[k]).reshape(-1) for k in sa]).norm()
    assert float(moved) > 0 and float(apart) < (0.5 if bf16 else 0.01) * float(moved), (float(apart), float(moved))
    assert model.calibration is not None
