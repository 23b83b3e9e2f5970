"""4-bit NF4 (bitsandbytes) paths run for real on tiny random models: DICE
released-style loading, DICE QLoRA training from the CLI (loss, resume,
reload into `editlens dice`), ADIEE QLoRA (train, strict reload, scoring).
Tests that need bitsandbytes skip where it is not importable; the error
paths for a machine without it run everywhere."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import DICE_BOX, write_dice_records
from typer.testing import CliRunner

CLONE = Path(__file__).parent / "data" / "dice_prompts_clone"
BOX = DICE_BOX


@pytest.fixture
def bnb():
    return pytest.importorskip("bitsandbytes")


@pytest.fixture
def no_bnb(monkeypatch):
    """A machine without bitsandbytes: importing it fails."""
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)


def _cli(args, code=0):
    from editlens.cli.main import app

    r = CliRunner().invoke(app, [str(a) for a in args])
    assert code is None or r.exit_code == code, r.output
    return r


def _json(r):
    return json.loads(r.stdout[r.stdout.index("{"):])


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Two image pairs with one added red box, as DICE detector records."""
    return write_dice_records(tmp_path_factory.mktemp("quant-data"))


@pytest.fixture(scope="module")
def trainable_base(tmp_path_factory):
    from editlens.testing.tiny_dice import build_trainable_idefics3

    return build_trainable_idefics3(tmp_path_factory.mktemp("quant-idefics3"))


# -- choices, messages, dtype (no bitsandbytes needed) ---------------------------------

def test_choices_and_what_auto_means(monkeypatch):
    from editlens.errors import InputError
    from editlens.models import quant

    assert [quant.normalise_choice(c) for c in ("auto", "NF4", "4bit", "none")] == ["auto", "nf4", "nf4", "none"]
    with pytest.raises(InputError, match="--quantization must be one of auto, nf4, none"):
        quant.normalise_choice("int8")
    assert quant.use_4bit("none", "cuda") == (False, "")
    monkeypatch.setattr(quant, "bitsandbytes_problem", lambda: None)  # as if installed
    ok, why = quant.use_4bit("auto", "cpu")
    assert not ok and "only on CUDA" in why and "nf4 forces it" in why  # auto: 4-bit only where it pays
    assert quant.use_4bit("auto", "cuda:0") == (True, "")
    assert quant.use_4bit("nf4", "cpu") == (True, "")


def test_compute_dtype_is_chosen_for_the_device(monkeypatch):
    from editlens.models import precision, quant

    monkeypatch.delenv("EDITLENS_DTYPE", raising=False)  # what auto means, whatever the suite runs in

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda flags=None: True)
    assert quant.compute_dtype("cpu") == torch.bfloat16
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda flags=None: False)
    assert quant.compute_dtype("cpu") == torch.float32  # emulated bf16 would be slower than fp32
    monkeypatch.setattr(precision, "resolve_device", lambda d: "cuda")
    monkeypatch.setattr(precision, "_cuda_features", lambda d: {"gpu": "X", "bf16": True})
    assert quant.compute_dtype("cuda", torch.float16) == torch.float16  # the DICE release computes in fp16


def test_forced_4bit_without_bitsandbytes_is_one_clear_line(no_bnb, pairs, trainable_base, tmp_path):
    from editlens.errors import ModelUnavailableError
    from editlens.models import quant

    assert "bitsandbytes is not importable" in quant.bitsandbytes_problem()
    with pytest.raises(ModelUnavailableError, match=r"nf4 needs bitsandbytes: pip install 'editlens\[quant\]'"):
        quant.use_4bit("nf4", "cpu")
    ok, why = quant.use_4bit("auto", "cuda")
    assert not ok and "bitsandbytes" in why  # auto falls back, saying why
    r = _cli(["dice-train", "--stage", "detect", "--data", pairs / "train.jsonl", "--base", trainable_base,
              "--out", tmp_path / "o", "--quantization", "nf4", "--no-progress"], code=2)
    assert "--quantization nf4 needs bitsandbytes: pip install 'editlens[quant]'" in r.output
    assert "Traceback" not in r.output
    r = _cli(["dice-train", "--stage", "detect", "--data", pairs / "train.jsonl", "--base", trainable_base,
              "--out", tmp_path / "o", "--quantization", "int4", "--no-progress"], code=2)
    assert "must be one of auto, nf4, none" in r.output


# -- DICE released-style loading in 4-bit ------------------------------------------------

def test_released_dice_runs_in_4bit_and_says_so(bnb, pairs, tmp_path):
    from editlens.dice.released import ModelSpec, ReleasedModel, load_base
    from editlens.errors import ModelUnavailableError
    from editlens.models.quant import compute_dtype, dtype_name
    from editlens.testing.tiny_dice import build_released_layout

    layout = build_released_layout(tmp_path / "rel")
    (db, da), (cb, ca) = layout["detector"], layout["coherence"]
    preset = tmp_path / "p.json"
    preset.write_text(json.dumps({"detector": f"{db}+{da}", "coherence": f"{cb}+{ca}", "longest_edge": None,
                                  "detector_generation": {"max_new_tokens": 12, "repetition_penalty": 1.5}}))
    r = _cli(["dice", "--source", pairs / "s0.png", "--edited", pairs / "e0.png", "--instruction", "add a cat",
              "--dice-preset", preset, "--dice-quantization", "nf4", "--json"], code=None)
    doc = json.loads(r.stdout)
    # random weights: parsed, or honestly unscored with the raw answer kept (exit 1, as `compare`)
    assert doc["differences"] or (doc["unparsable"] and doc["raw"] and doc["problem"])
    assert r.exit_code == (1 if doc.get("unparsable") else 0), r.output
    models = doc["dice_models"]
    device = models["detector"]["device"]  # auto device: CUDA where there is one
    # on CUDA the released recipe itself: fp16 4-bit compute (the rest in bf16); on a CPU the policy's dtype
    want = "float16" if device.startswith("cuda") else dtype_name(compute_dtype(device))
    for role in ("detector", "coherence"):
        p = models[role]["precision"]
        assert models[role]["quantized_4bit"] and p["weights"] == "4-bit NF4" and p["compute_dtype"] == want
        assert p["linear_4bit_layers"] == 27  # 2 layers x 7 projections x 2 (text) ... every language-model Linear
    assert models["identical_to_release"] is False
    if not device.startswith("cuda"):
        assert any(f"4-bit NF4 computing in {want}, vision tower, connector, embeddings and LM head in {want}, "
                   "instead of the release's float16 and bfloat16" in n for n in models["differences_from_release"])

    # auto on a CPU stays unquantised and says why; the 4-bit model is the same network, quantised
    spec = ModelSpec(str(db), str(da))
    q, f = ReleasedModel(spec, "cpu", "nf4"), ReleasedModel(spec, "cpu", "auto")
    assert not f.quantized and "auto uses 4-bit only on CUDA" in f.notes[0]
    ids = torch.tensor([[1, 5, 9, 14, 3, 7]])
    with torch.no_grad():
        lq = q.model(input_ids=ids).logits.float().flatten()
        lf = f.model(input_ids=ids).logits.float().flatten()
    assert not torch.allclose(lq, lf)  # really quantised ...
    assert torch.corrcoef(torch.stack([lq, lf]))[0, 1] > 0.9  # ... from the same weights, none random

    # a base with a weight missing is refused in 4-bit too (never run with random parts)
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(db, broken)
    st = load_file(str(broken / "model.safetensors"))
    victim = next(k for k in st if "layers.0.self_attn.q_proj" in k)
    save_file({k: v for k, v in st.items() if k != victim}, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelUnavailableError, match="missing from the checkpoint"):
        load_base(str(broken), "cpu", "nf4", [])


def test_4bit_on_a_cpu_with_avx512_bf16_runs_or_is_refused_before_loading(bnb, pairs, tmp_path, monkeypatch):
    """bitsandbytes repacks 4-bit layers for its AVX512-BF16 CPU kernel at the
    first inference call, and the repacking fails on layers narrower than its
    block size (every layer of a tiny model; a real 8B model's fit). Simulated
    here by telling bitsandbytes this CPU has the instructions."""
    import bitsandbytes.nn.modules as bnb_modules

    from editlens.dice.released import ModelSpec, ReleasedModel
    from editlens.models import quant
    from editlens.testing.tiny_dice import build_released_layout

    monkeypatch.setattr(bnb_modules, "has_avx512bf16", lambda: True)
    (db, da), _ = build_released_layout(tmp_path / "rel").values()
    spec = ModelSpec(str(db), str(da))
    # what used to happen: every sample failed inside the kernel ("shape '[32, 0]' is invalid")
    unguarded = []
    monkeypatch.setattr(quant, "prepare_4bit", lambda model, *a, **k: unguarded.append(model) or {})
    model = ReleasedModel(spec, "cpu", "nf4").model
    layer = next(m for m in model.modules() if isinstance(m, bnb_modules.Linear4bit))
    with pytest.raises(RuntimeError, match=r"shape '\[32, 0\]' is invalid"), torch.no_grad():
        layer(torch.zeros(1, layer.in_features))
    monkeypatch.undo()
    monkeypatch.setattr(bnb_modules, "has_avx512bf16", lambda: True)

    # now: layers the fused kernel cannot pack keep the generic path, and the model answers
    r = _cli(["dice", "--source", pairs / "s0.png", "--edited", pairs / "e0.png", "--instruction", "add a cat",
              "--dice-detector", f"{db}+{da}", "--dice-quantization", "nf4", "--device", "cpu", "--json"], code=None)
    doc = json.loads(r.stdout)
    assert r.exit_code == (1 if doc.get("unparsable") else 0), r.output
    assert "failed" not in doc and "generation failed" not in str(doc.get("problem"))
    assert doc["differences"] or (doc["unparsable"] and doc["raw"])  # a real answer, parsed or kept raw
    # and a kernel that cannot run at all is refused before any sample, with the fix
    monkeypatch.setattr(quant, "_packable_for_cpu", lambda layer: True)
    r = _cli(["dice", "--source", pairs / "s0.png", "--edited", pairs / "e0.png", "--instruction", "add a cat",
              "--dice-detector", f"{db}+{da}", "--dice-quantization", "nf4", "--device", "cpu", "--json"], code=2)
    assert "4-bit NF4 does not run on this cpu" in r.output and "--dice-quantization none" in r.output
    assert "Traceback" not in r.output


def test_a_generation_error_fails_the_sample_never_unparsable(pairs, tmp_path, monkeypatch):
    from editlens.core.types import EditSample
    from editlens.dice.released import ReleasedModel
    from editlens.metrics.registry import create_metric
    from editlens.testing.tiny_dice import build_released_layout

    (db, da), _ = build_released_layout(tmp_path / "rel").values()

    def boom(self, *a, **k):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(ReleasedModel, "generate", boom)
    ev = create_metric("dice", dice_detector=f"{db}+{da}", dice_quantization="none", device="cpu")
    (score,) = ev.compute([EditSample("x", str(pairs / "s0.png"), str(pairs / "e0.png"), "add a cat").load()])
    assert score.status == "failed" and "kernel exploded" in score.reason and score.value is None
    assert score.details.get("failed") is True and "unparsable" not in score.details


# -- DICE QLoRA training ----------------------------------------------------------------------

def _train(base, data, out, steps, extra=(), code=0):
    r = _cli(["dice-train", "--stage", "detect", "--data", data, "--base", base, "--out", out, "--steps", steps,
              "--lr", "1e-2", "--rank", "8", "--dropout", "0", "--save-every", "6", "--eval-max-new-tokens", "30",
              "--repetition-penalty", "1.0", "--dice-prompts", CLONE, "--quantization", "nf4", "--no-progress",
              "--json", *extra], code=code)
    return _json(r) if code == 0 else r.output


def test_dice_qlora_trains_resumes_and_reloads_on_a_4bit_base(bnb, pairs, trainable_base, tmp_path):
    from editlens.dice.prompt_sets import load_official_prompts
    from editlens.dice.released import ModelSpec, ReleasedModel
    from editlens.dice.training import ExampleBuilder, encode_example, load_records

    out = tmp_path / "run"
    first = _train(trainable_base, pairs / "train.jsonl", out, 8)
    assert first["steps_done"] == 8 and first["last_loss"] < 0.5 * first["first_loss"]
    more = _train(trainable_base, pairs / "train.jsonl", out, 12)
    assert more["resumed_from"] == 8 and more["steps_done"] == 12
    assert more["last_loss"] < 0.25 * more["first_loss"]
    log = [json.loads(x) for x in open(out / "log.jsonl")]
    assert [r["step"] for r in log if "loss" in r] == list(range(1, 13))

    # what ran is recorded: checkpoint, adapter metadata, preset
    want = {"base_weights": "4-bit NF4", "optimizer": "AdamW 8-bit"}  # paged only on CUDA
    meta = json.loads((out / "adapter" / "editlens_training.json").read_text())["precision"]
    state = json.loads(next((out / "checkpoints").glob("step-*/state.json")).read_text())["precision"]
    assert {k: meta[k] for k in want} == want and state == meta
    assert json.loads((out / "preset.json").read_text())["quantization"] == "nf4"
    # resuming with another base precision is refused (an 8-bit optimizer state does not fit AdamW)
    msg = _train(trainable_base, pairs / "train.jsonl", out, 14, ["--quantization", "none"], code=2)
    assert "other settings" in msg and "base_weights was 4-bit NF4" in msg

    # the adapter reloads into `editlens dice` on a 4-bit base
    r = _cli(["dice", "--source", pairs / "s0.png", "--edited", pairs / "e0.png", "--instruction", "add a cat",
              "--dice-preset", out / "preset.json", "--dice-quantization", "nf4", "--json"], code=None)
    doc = json.loads(r.stdout)
    assert r.exit_code == (1 if doc.get("unparsable") else 0), r.output  # unparsable: exit 1, as compare
    assert doc["dice_models"]["detector"]["precision"]["weights"] == "4-bit NF4"
    assert doc["differences"] or (doc["unparsable"] and doc["raw"])
    # ... and carries what was learnt: the reloaded model's loss on a training answer is the trained one's
    adapter = ReleasedModel(ModelSpec(str(trainable_base), str(out / "adapter")), "cpu", "nf4")
    base = ReleasedModel(ModelSpec(str(trainable_base)), "cpu", "nf4")
    builder = ExampleBuilder("detect", load_official_prompts(str(CLONE)), "released", True)
    enc = encode_example(adapter.processor, *builder(load_records(pairs / "train.jsonl", "detect")[0]))
    with torch.no_grad():
        trained, untrained = float(adapter.model(**enc).loss), float(base.model(**enc).loss)
    assert untrained == pytest.approx(first["first_loss"], rel=0.05)  # step 1 ran on the bare base (LoRA B = 0)
    assert trained < 0.25 * untrained


# -- ADIEE QLoRA ------------------------------------------------------------------------------

def _adiee_dataset(root: Path, n: int = 8) -> Path:
    from PIL import Image

    (root / "images").mkdir(parents=True)
    rows = []
    for i in range(n):
        src = np.random.default_rng(i).integers(0, 256, (16, 16, 3), dtype=np.uint8)
        edt = src if i % 2 == 0 else 255 - src
        Image.fromarray(src).save(root / "images" / f"s{i}.png")
        Image.fromarray(edt).save(root / "images" / f"e{i}.png")
        rows.append({"id": f"x{i}", "source": f"images/s{i}.png", "edited": f"images/e{i}.png",
                     "instruction": "invert the colours", "score": float(i % 2), "split": "val" if i >= n - 2 else "train"})
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_adiee_qlora_trains_reloads_strictly_and_scores(bnb, tmp_path):
    from editlens.adiee.checkpoint import CheckpointError, load_scorer, read_meta
    from editlens.adiee.prompts import load_prompts
    from editlens.adiee.train import Examples, TrainConfig, read_dataset, train, validate
    from editlens.core.types import EditSample
    from editlens.models.random_init import build_llava_next

    base = build_llava_next(tmp_path / "llava")
    data = _adiee_dataset(tmp_path / "ds")
    cfg = TrainConfig(base=str(base), data=str(data), out=str(tmp_path / "a"), steps=6, lr=5e-3, batch_size=2,
                      image_side=32, lora_dropout=0.0, val_every=6, save_every=3, device="cpu", seed=1, qlora=True)
    lines = []
    s = train(cfg, echo=lines.append, progress=False)
    assert "4-bit NF4 base" in lines[0]
    assert s["last_loss"] < s["first_loss"]
    log = [json.loads(x) for x in (tmp_path / "a" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["ce_loss"] < log[0]["ce_loss"]
    ckpt = tmp_path / "a" / "scorer"
    assert read_meta(ckpt)["precision"]["base_weights"] == "4-bit NF4"

    # strict reload on a 4-bit base: every key accounted for, and the same predictions as in training
    scorer, rep, hidden = load_scorer(ckpt, device="cpu", quantization="nf4")
    assert rep.missing == rep.unexpected == rep.mismatched == [] and rep.precision["weights"] == "4-bit NF4"
    rows = read_dataset(data)
    ex = Examples(rows, data, scorer, load_prompts(None), cfg)
    again = validate(scorer, ex, [6, 7], cfg.batch_size)
    assert again["mae"] == pytest.approx(log[-1]["val"]["mae"], abs=1e-3)
    # auto on a CPU: the unquantised base, the report says so
    _, rep_auto, _ = load_scorer(ckpt, device="cpu")
    from editlens.models.precision import decide

    assert rep_auto.precision["weights"] == decide("auto", "cpu").dtype and rep_auto.missing == []

    # scoring through the evaluator (4-bit is part of its cache key)
    from editlens.runner.selection import select_metrics

    def evaluator(**options):
        return select_metrics(["adiee"], models={"adiee": str(ckpt)}, device="cpu",
                              options={"adiee": {"image_side": 32, "cache": False, **options}}).metrics[0]

    ev = evaluator(quantization="nf4", require_token=False)
    assert ev.settings()["quantization"] == "nf4"
    sample = EditSample("x1", str(data / "images/s1.png"), str(data / "images/e1.png"), "invert the colours").load()
    (score,) = ev.score_batch([sample])
    assert score.status == "scored" and 0 <= score.value <= 10  # require_token False: the released rule
    assert ev.scorer.vlm is not None and ev.load_report.precision["weights"] == "4-bit NF4"
    assert "quantization" not in evaluator().settings()  # auto on a CPU: unquantised, cache keys as before

    # from the CLI: strict 4-bit load and its report
    r = _cli(["adiee", "inspect", ckpt, "--quantization", "nf4"])
    doc = _json(r)
    assert doc["report"]["missing"] == [] and doc["report"]["precision"]["weights"] == "4-bit NF4"

    # a damaged adapter is refused on a 4-bit base too
    from safetensors.torch import load_file, save_file

    f = ckpt / "adapter_model.safetensors"
    st = load_file(str(f))
    save_file({k: v for i, (k, v) in enumerate(st.items()) if i > 0}, str(f))
    with pytest.raises(CheckpointError, match="missing"):
        load_scorer(ckpt, device="cpu", quantization="nf4")

    # QLoRA saves our layout only (merging into 4-bit weights would not make a full state dict)
    r = _cli(["adiee", "train", "--data", data, "--base", base, "--out", tmp_path / "b", "--qlora", "--layout",
              "both", "--device", "cpu"], code=2)
    assert "--qlora trains LoRA adapters on a 4-bit base" in r.output


def test_adiee_base_with_a_missing_weight_is_refused(tmp_path):
    """Checked before any 4-bit conversion, so it needs no bitsandbytes."""
    import shutil

    from safetensors.torch import load_file, save_file

    from editlens.adiee.checkpoint import CheckpointError, scorer_from_base
    from editlens.models.random_init import build_llava_next

    base = build_llava_next(tmp_path / "llava")
    st = load_file(str(base / "model.safetensors"))
    victim = next(k for k in st if "layers.1.self_attn.v_proj" in k)
    save_file({k: v for k, v in st.items() if k != victim}, str(base / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="base model.*1 weight.*missing.*randomly initialised"):
        scorer_from_base(str(base), device="cpu")
    shutil.rmtree(base)


def test_preset_quantization_is_checked(tmp_path):
    from editlens.dice.released import load_preset
    from editlens.errors import InputError

    f = tmp_path / "p.json"
    f.write_text(json.dumps({"quantization": "4bit"}))
    assert load_preset(str(f)).quantization == "nf4"
    f.write_text(json.dumps({"quantization": "int8"}))
    with pytest.raises(InputError, match="quantization must be nf4"):
        load_preset(str(f))
