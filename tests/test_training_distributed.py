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
    env["CUDA_VISIBLE_DEVICES"] = ""  # CPU processes on gloo, also on a machine with GPUs
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
# `--multi_gpu`, not `--cpu`: accelerate's `--cpu` takes its one-process launcher whatever --num_processes says;
# `--multi_gpu` starts the processes (torch elastic) and editlens joins them on gloo for --device cpu
ACCELERATE = ["-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1", "--multi_gpu",
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


def test_trainers_that_copy_their_model_refuse_fsdp_before_loading(monkeypatch, tmp_path):
    """two-frame training and tune-editor copy their model (the LoRA merge of the export; validation's UNet),
    which FSDP's sharded modules refuse with an AssertionError from inside torch: both say so up front, also
    when `accelerate launch --use_fsdp` chose FSDP, and name what works."""
    from editlens.adiee.tune_editor import tune_editor
    from editlens.twoframe.train import train

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    with pytest.raises(InputError, match=r"twoframe train does not train with FSDP .*--sharding ddp"):
        train(None, None, tmp_path, None, sharding="fsdp")  # type: ignore[arg-type]
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(InputError, match=r"adiee tune-editor does not train with FSDP .*copy the UNet"):
        tune_editor(None)  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())  # nothing written


# -- the four trainers -----------------------------------------------------------------------------
# Every command below is run as written on its own would run it, but the commands of one launcher share one
# launch (tests/cli_jobs.py): one `python` for the one-process references, one `accelerate launch` and one
# `torchrun` for the 2-process runs. Each process imports torch & co. once instead of once per command
# (~10 s of CPU each: most of these tests' time); the tests below then check each command's outputs.

JOBS = Path(__file__).resolve().parent / "cli_jobs.py"


def dice_setup_in(root: Path):  # type: ignore[no-untyped-def]
    from helpers import write_dice_records

    from editlens.testing.tiny_dice import build_trainable_idefics3

    (root / "data").mkdir()
    return build_trainable_idefics3(root / "base"), write_dice_records(root / "data")


def _dice_args(dice_setup) -> list[str]:  # type: ignore[no-untyped-def]
    base, data = dice_setup
    return ["dice-train", "--stage", "detect", "--data", str(data / "train.jsonl"), "--base", str(base),
            "--steps", "3", "--batch-size", "2", "--lr", "1e-2", "--rank", "8", "--dropout", "0.1",
            "--save-every", "2", "--device", "cpu", "--no-progress", "--json"]


def tune_setup_in(root: Path):  # type: ignore[no-untyped-def]
    from editlens.editors.random_init import make_tiny_editor
    from editlens.testing.tiny_tuning import make_relabelled

    return (make_tiny_editor(root / "base", "instruct-pix2pix", image_size=16),
            make_relabelled(root / "data"))


def _tune_args(tune_setup, *extra: str) -> list[str]:  # type: ignore[no-untyped-def]
    base, data = tune_setup
    return ["adiee", "tune-editor", str(data), "--base", str(base), "--resolution", "16", "--lr", "1e-3",
            "--conditioning-dropout", "0.2", "--save-every", "1", "--device", "cpu", "--no-progress", *extra]


def adiee_setup_in(root: Path):  # type: ignore[no-untyped-def]
    from PIL import Image

    from editlens.models.random_init import BUILDERS

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


def _adiee_args(adiee_setup) -> list[str]:  # type: ignore[no-untyped-def]
    base, data = adiee_setup
    return ["adiee", "train", "--data", str(data), "--base", str(base), "--steps", "2", "--batch-size", "1",
            "--grad-accum", "2", "--lr", "5e-3", "--image-side", "32", "--lora-dropout", "0.05", "--val-every", "0",
            "--save-every", "1", "--device", "cpu", "--no-progress"]


def twoframe_setup_in(root: Path):  # type: ignore[no-untyped-def]
    from helpers import rng_image
    from PIL import Image

    from editlens.models.random_init import build_clip

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


def _twoframe_args(twoframe_setup) -> list[str]:  # type: ignore[no-untyped-def]
    base, manifest = twoframe_setup
    return ["twoframe", "train", str(manifest), "--model", str(base), "--tune", "lora:2", "--epochs", "2",
            "--batch-size", "8", "--lr", "1e-3", "--val-fraction", "0", "--device", "cpu", "--no-progress",
            "--json"]


def _setup(make, root: Path):  # type: ignore[no-untyped-def]
    root.mkdir(parents=True, exist_ok=True)
    return make(root)


class Launches:
    """Where each command of the shared launches wrote (``out(name)``) and what it said and returned
    (``result(name)``: every process's console output, joined, and the launch's exit status)."""

    def __init__(self, root: Path):
        self.root = root
        self.tune_losses_after_accelerate: list[float] = []
        self.tune_base = self.twoframe_base = root

    def out(self, name: str) -> Path:
        return self.root / name

    def _logs(self, name: str) -> list[Path]:
        logs = sorted(self.root.glob(f"{name}.log.rank*[0-9]"))
        assert logs, f"{name}: the launch never ran this command"
        return logs

    def codes(self, name: str) -> list[int]:
        """Each process's exit status for the command ``name`` (rank order)."""
        return [int(Path(f"{p}.status").read_text()) for p in self._logs(name)]

    def result(self, name: str) -> subprocess.CompletedProcess:
        code = max(self.codes(name), key=abs)  # as a launcher reports: non-zero when a process failed
        return subprocess.CompletedProcess([name], code, "".join(p.read_text() for p in self._logs(name)), "")


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> Launches:  # type: ignore[no-untyped-def]
    """Made once per test run (tests/helpers.py built_once): the worker that gets there first builds the tiny
    models and launches the commands, any other waits and reads the same folders."""
    from helpers import built_once

    def build(root: Path) -> dict:
        runs = Launches(root)
        dice_setup, tune_setup = _setup(dice_setup_in, root / "dice"), _setup(tune_setup_in, root / "tune")
        adiee_setup, twoframe_setup = _setup(adiee_setup_in, root / "adiee"), _setup(twoframe_setup_in, root / "tf")

        def job(name: str, args: list[str], out: str | None = None) -> dict:
            return {"args": [*args, "--out", str(runs.out(out or name))], "log": str(root / f"{name}.log")}

        def launch(prefix: list[str], jobs: list[dict], name: str) -> None:
            (root / f"{name}.json").write_text(json.dumps(jobs))
            _run(prefix, [str(JOBS), str(root / f"{name}.json")])

        dice, adiee, twoframe = _dice_args(dice_setup), _adiee_args(adiee_setup), _twoframe_args(twoframe_setup)
        resume = _tune_args(tune_setup, "--batch-size", "2", "--grad-accum", "2")
        share = _tune_args(tune_setup, "--batch-size", "2", "--steps", "3")
        # the same commands in the same order in one process and on two
        launch([], [job("dice-one", dice), job("resume-one", [*resume, "--steps", "3"]), job("share-one", share),
                    job("adiee-one", adiee), job("twoframe-one", twoframe)], "one")
        launch(ACCELERATE[:-2], [job("resume-first", [*resume, "--steps", "2"], out="resume-two")], "accelerate")
        after_accelerate = _losses(runs.out("resume-two"))
        launch(TORCHRUN[:-2], [job("dice-two", dice), job("dice-bad", [*dice, "--batch-size", "3"]),
                               job("dice-fsdp", [*dice, "--sharding", "fsdp"]),
                               job("resume-two", [*resume, "--steps", "3"]), job("share-two", share),
                               job("adiee-two", adiee), job("twoframe-two", twoframe)], "torchrun")
        return {"root": str(root), "after_accelerate": after_accelerate, "tune_base": str(tune_setup[0]),
                "twoframe_base": str(twoframe_setup[0])}

    made = built_once(tmp_path_factory, "distributed-launches", build)
    runs = Launches(Path(made["root"]))
    runs.tune_losses_after_accelerate = made["after_accelerate"]
    runs.tune_base, runs.twoframe_base = Path(made["tune_base"]), Path(made["twoframe_base"])
    return runs


def _done(launches: Launches, name: str) -> subprocess.CompletedProcess:
    r = launches.result(name)
    assert r.returncode == 0, (name, r.stdout[-6000:])
    return r


@pytest.mark.slow
def test_dice_train_on_two_processes_equals_one(launches):
    _done(launches, "dice-one")
    r = _done(launches, "dice-two")
    one_dir, two_dir = launches.out("dice-one"), launches.out("dice-two")
    assert r.stdout.count('"steps_done"') == 1  # one report, the main process's
    one, two = _losses(one_dir), _losses(two_dir)
    assert len(one) == 3 and np.isfinite(one).all()
    # each process accumulates whole examples, seeded by (seed, step, example): the same computation
    assert two == pytest.approx(one, rel=1e-6, abs=1e-7)
    adapter = "adapter/adapter_model.safetensors"
    assert _max_diff(_weights(one_dir / adapter), _weights(two_dir / adapter)) <= 1e-6
    assert json.loads((two_dir / "summary.json").read_text())["processes"] == 2

    # a process count that does not divide the batch is refused before anything loads
    bad = launches.result("dice-bad")
    # each process refuses with the CLI's input-error status (torchrun itself then exits 1)
    assert launches.codes("dice-bad") == [2, 2], bad.stdout[-3000:]
    assert "--batch-size 3 does not split among 2 processes" in bad.stdout
    assert not (launches.out("dice-bad") / "checkpoints").exists()


@pytest.mark.slow
def test_dice_train_sharded_with_fsdp_equals_one(launches):
    """--sharding fsdp: the decoder layers (with their LoRA adapters) sharded over 2 gloo processes; the loss
    history, the checkpoint's adapter and the exported adapter equal one process's, and the exported adapter
    is whole: it loads with peft's from_pretrained."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    _done(launches, "dice-one")
    r = _done(launches, "dice-fsdp")
    one_dir, two_dir = launches.out("dice-one"), launches.out("dice-fsdp")
    assert r.stdout.count('"steps_done"') == 1
    one, two = _losses(one_dir), _losses(two_dir)
    assert len(two) == 3 and two == pytest.approx(one, rel=1e-6, abs=1e-7)
    summary = json.loads((two_dir / "summary.json").read_text())
    assert summary["sharding"] == "fsdp" and summary["fsdp_units"] >= 1 and summary["processes"] == 2
    for adapter in ("adapter", "checkpoints/step-0000002/adapter"):
        path = f"{adapter}/adapter_model.safetensors"
        assert _max_diff(_weights(one_dir / path), _weights(two_dir / path)) <= 1e-6
    base = AutoModelForImageTextToText.from_pretrained(str(launches.root / "dice" / "base"))
    model = PeftModel.from_pretrained(base, str(two_dir / "adapter"))
    trained = _weights(two_dir / "adapter" / "adapter_model.safetensors")
    loaded = [v.float() for k, v in model.state_dict().items() if "lora_" in k]
    assert len(loaded) == len(trained) > 0
    assert sorted(float(v.norm()) for v in loaded) == pytest.approx(sorted(float(v.norm()) for v in trained.values()))


@pytest.mark.slow
def test_tune_editor_on_two_processes_equals_one_and_resumes(launches):
    """--batch-size 2 --grad-accum 2 on 2 processes: each computes one whole micro-batch; a run of 2
    steps (accelerate launch) resumed to 3 (torchrun) equals 3 steps in one process."""
    _done(launches, "resume-one")
    _done(launches, "resume-first")  # accelerate launch, 2 steps
    assert launches.codes("resume-first") == [0, 0]  # accelerate started two processes, not one
    assert len(launches.tune_losses_after_accelerate) == 2
    r = _done(launches, "resume-two")  # torchrun, resumed to 3 in the same folder
    assert r.stdout.count("resumed from") == 1 and r.stdout.count("editor: ") == 1
    one_dir, two_dir = launches.out("resume-one"), launches.out("resume-two")
    one, two = _losses(one_dir), _losses(two_dir)
    assert len(two) == 3 and two == pytest.approx(one, rel=1e-6, abs=1e-7)
    assert two[:2] == launches.tune_losses_after_accelerate
    unet = "editor/unet/diffusion_pytorch_model.safetensors"
    w1, w2 = _weights(one_dir / unet), _weights(two_dir / unet)
    assert _max_diff(w1, w2) <= 1e-6
    card = json.loads((two_dir / "editor" / "editlens_editor.json").read_text())
    assert card["source"]["trained_steps"] == 3
    summary = json.loads((two_dir / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["resumed_from"] == 2


@pytest.mark.slow
def test_tune_editor_shares_each_micro_batch_with_the_same_noise(launches):
    """--batch-size 2 --grad-accum 1 on 2 processes: one example each; every sample's noise, timestep
    and dropout come from its own generator, so the first step's loss is the one-process loss and the
    run stays with it (batch-size-1 kernels round differently from batch-size-2 ones)."""
    _done(launches, "share-one")
    _done(launches, "share-two")
    one_dir, two_dir = launches.out("share-one"), launches.out("share-two")
    one, two = _losses(one_dir), _losses(two_dir)
    bf16 = json.loads((one_dir / "summary.json").read_text())["precision"]["dtype"] != "float32"
    assert two[0] == pytest.approx(one[0], rel=1e-3 if bf16 else 1e-5)
    assert two == pytest.approx(one, rel=2e-2 if bf16 else 1e-3)
    unet = "editor/unet/diffusion_pytorch_model.safetensors"
    base = _weights(launches.tune_base / "unet" / "diffusion_pytorch_model.safetensors")
    w1, w2 = _weights(one_dir / unet), _weights(two_dir / unet)
    moved = torch.cat([(w1[k] - base[k]).reshape(-1) for k in w1]).norm()
    apart = torch.cat([(w1[k] - w2[k]).reshape(-1) for k in w1]).norm()
    assert float(apart) < (0.5 if bf16 else 0.1) * float(moved), (float(apart), float(moved))


@pytest.mark.slow
def test_adiee_train_on_two_processes(launches):
    from editlens.adiee.checkpoint import load_scorer

    _done(launches, "adiee-one")
    r = _done(launches, "adiee-two")
    one_dir, two_dir = launches.out("adiee-one"), launches.out("adiee-two")
    assert r.stdout.count("checkpoint (ours layout)") == 1
    one, two = _losses(one_dir), _losses(two_dir)
    assert len(two) == 2 and np.isfinite(two).all()
    assert two == pytest.approx(one, rel=1e-6, abs=1e-7)  # whole micro-batches: LoRA dropout included
    a, _, _ = load_scorer(one_dir / "scorer", device="cpu")
    b, rep, _ = load_scorer(two_dir / "scorer", device="cpu")
    assert rep.missing == []
    sa, sb = a.score_decoder.state_dict(), b.score_decoder.state_dict()
    assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


@pytest.mark.slow
def test_twoframe_train_on_two_processes_gathers_the_batch(launches):
    """LoRA on the towers: each process encodes its share of a batch (4 of 8, then 1 of the last 2),
    the features are gathered with their gradients, and every process computes the whole batch's loss."""
    from editlens.twoframe.model import load_twoframe

    base = launches.twoframe_base
    _done(launches, "twoframe-one")
    r = _done(launches, "twoframe-two")
    one_dir, two_dir = launches.out("twoframe-one"), launches.out("twoframe-two")
    assert r.stdout.count('"first_epoch_loss"') == 1
    one, two = _losses(one_dir), _losses(two_dir)
    assert len(two) == 4 and np.isfinite(two).all()
    # float32: the same to rounding; bfloat16 kernels on 4 + 4 (and 1 + 1) rows round unlike 8 (and 2)
    bf16 = json.loads((one_dir / "summary.json").read_text())["precision"]["dtype"] != "float32"
    assert two[0] == pytest.approx(one[0], rel=1e-3 if bf16 else 1e-6)
    assert two == pytest.approx(one, rel=2e-2 if bf16 else 1e-5)
    model = load_twoframe(two_dir / "model", device="cpu")
    ref = load_twoframe(one_dir / "model", device="cpu")
    start = load_twoframe(base, device="cpu")
    sa, sb, s0 = ({k: v.detach() for k, v in m.clip.named_parameters()} for m in (ref, model, start))
    moved = torch.cat([(sa[k] - s0[k]).reshape(-1) for k in sa]).norm()
    apart = torch.cat([(sa[k] - sb[k]).reshape(-1) for k in sa]).norm()
    assert float(moved) > 0 and float(apart) < (0.5 if bf16 else 0.01) * float(moved), (float(apart), float(moved))
    assert model.calibration is not None
