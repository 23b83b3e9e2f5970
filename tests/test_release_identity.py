"""Released models run as released by default: the one VLM loader (reference
parsing, 4-bit skip lists from the family presets), every released model's
default precision with bitsandbytes installed, ADIEE's GenAI-Bench rule and
question choice, and the size policy of each evaluator."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from editlens.errors import InputError

# -- the one VLM loader ------------------------------------------------------------------


def test_base_adapter_references_split_the_same_way_everywhere(tmp_path):
    from editlens.dice.released import ModelSpec
    from editlens.models.vlm import VlmReference, parse_reference
    from editlens.rewardmodels.editscore import split_ref

    assert parse_reference("org/base+org/adapter/sub") == VlmReference("org/base", "org/adapter/sub")
    # three parts: split at the first '+' (hub ids never hold one), in DICE and EditScore alike
    assert ModelSpec.parse("a/b+c/d+e/f") == ModelSpec("a/b", "c/d+e/f")
    assert split_ref("a/b+c/d+e/f", None) == ("a/b", "c/d+e/f")
    # a folder whose name holds '+' is one reference; a base folder with '+' splits after it
    odd = tmp_path / "my+model"
    odd.mkdir()
    assert parse_reference(str(odd)) == VlmReference(str(odd), None)
    assert parse_reference(f"{odd}+org/adapter") == VlmReference(str(odd), "org/adapter")
    assert split_ref("org/adapter", "org/base") == ("org/base", "org/adapter")
    for bad in ("", "base+", "+adapter"):
        with pytest.raises(InputError):
            parse_reference(bad)


def test_4bit_skip_lists_come_from_the_family_presets():
    from editlens.models.registry import family_for

    assert family_for("idefics3").quantize_skip == ("vision_model", "connector", "lm_head")
    assert family_for("qwen2_5_vl").quantize_skip == ("visual", "lm_head")
    assert family_for("llava_next").quantize_skip == ("vision_tower", "multi_modal_projector", "lm_head")


def test_loaders_hold_no_skip_list_or_split_of_their_own():
    """DICE, ADIEE, EditScore and EditReward keep recipes; the loading is editlens.models.vlm's."""
    from pathlib import Path

    import editlens

    root = Path(editlens.__file__).parent
    for rel in ("dice/released.py", "adiee/checkpoint.py", "rewardmodels/editscore.py", "rewardmodels/editreward.py"):
        text = (root / rel).read_text()
        assert "skip_modules" not in text and "rpartition(\"+\")" not in text and "partition(\"+\")" not in text, rel
        assert "from_pretrained(str(path), local_files_only=True, output_loading_info=True" not in text, rel


# -- default precision of every released model, with bitsandbytes installed ---------------------------------

def test_every_released_model_defaults_to_the_releases_precision_with_bitsandbytes_installed():
    pytest.importorskip("bitsandbytes")
    from editlens.adiee.evaluator import AdieeEvaluator
    from editlens.dice.released import load_preset
    from editlens.models.vlm import decide_quantization
    from editlens.rewardmodels.editreward import EditRewardEvaluator
    from editlens.rewardmodels.editscore import EditScoreEvaluator

    # "auto" would quantise on a GPU here (bitsandbytes imports): only a release that ran 4-bit may default to it
    assert decide_quantization("auto", "cuda").use_4bit
    assert EditScoreEvaluator(model="x").quantization == "none"  # the release: bf16, LoRA merged
    assert not decide_quantization(EditScoreEvaluator(model="x").quantization, "cuda").use_4bit
    assert EditRewardEvaluator.__init__.__defaults__ is not None
    import inspect

    assert inspect.signature(EditRewardEvaluator.__init__).parameters["quantization"].default == "none"
    # ADIEE: "auto" = 4-bit only for checkpoints trained on a 4-bit base (ours); a released one loads unquantised
    assert inspect.signature(AdieeEvaluator.__init__).parameters["quantization"].default == "auto"
    # DICE: the release itself ran its language models in 4-bit NF4, fp16 compute, the rest bf16
    p = load_preset("dice-idefics3")
    assert (p.quantization, p.compute_dtype, p.unquantised_dtype) == ("nf4", "float16", "bfloat16")


def test_editscore_loads_unquantised_and_merged_by_default_and_records_it(editscore_dirs):
    from editlens.metrics.registry import create_metric

    base, adapter = editscore_dirs["q25"]
    ev = create_metric("editscore", model=f"{base}+{adapter}", device="cpu", cache="none")
    loaded = ev._load()
    assert not loaded.quantized and loaded.merged
    short = ev.short_release()
    assert short["quantized_4bit"] is False and short["adapter_merged"] is True
    assert short["identical_to_release"] is False and short["differences_from_release"]


# -- ADIEE -------------------------------------------------------------------------------------

def _votes_and_scores(tmp_path):
    # (human vote, score A, score B): the 4-way and 3-way rules disagree on the last two
    table = [("leftvote", 9.0, 2.0), ("rightvote", 1.0, 6.0), ("tievote", 9.5, 9.2), ("bothbad_vote", 1.0, 2.0),
             ("tievote", 6.0, 7.0),       # equal types but not both >= 9: 4-way says both bad (wrong), 3-way tie (right)
             ("bothbad_vote", 9.0, 9.8)]  # both high: 4-way says tie (wrong), 3-way counts tie = both-bad (right)
    human, preds = [], []
    for i, (vote, a, b) in enumerate(table):
        human.append({"id": f"p{i}", "a": f"a{i}", "b": f"b{i}", "preference": vote})
        preds += [{"id": f"a{i}", "score": a}, {"id": f"b{i}", "score": b}]
    (tmp_path / "h.jsonl").write_text("".join(json.dumps(r) + "\n" for r in human))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in preds))
    return tmp_path / "h.jsonl", tmp_path / "p.jsonl"


def test_adiee_genai_bench_rule_differs_from_the_three_way_rule_and_says_which_it_used(tmp_path):
    from editlens.cli.main import app

    h, p = _votes_and_scores(tmp_path)
    r4 = CliRunner().invoke(app, ["adiee", "pairwise-eval", "--human", str(h), "--predictions", str(p),
                                  "--rule", "adiee-genai-4way", "--json"])
    assert r4.exit_code == 0, r4.output
    four = json.loads(r4.stdout)
    assert four["rule"] == "adiee-genai-4way" and four["accuracy"] == pytest.approx(4 / 6) and four["n"] == 6
    assert four["accuracy_by_vote"] == {"bothbad_vote": 0.5, "leftvote": 1.0, "rightvote": 1.0, "tievote": 0.5}
    r3 = CliRunner().invoke(app, ["adiee", "pairwise-eval", "--human", str(h), "--predictions", str(p), "--json"])
    three = json.loads(r3.stdout)
    assert three["rule"] == "adiee-3way" and three["released_rule_accuracy"] == pytest.approx(1.0)


def test_adiee_genai_pairs_without_a_score_count_wrong():
    from editlens.meta.protocols import adiee_genai_bench_accuracy

    res = adiee_genai_bench_accuracy([{"human_vote": "leftvote", "score_a": 9.0, "score_b": 1.0},
                                      {"human_vote": "leftvote", "score_a": None, "score_b": 1.0}])
    assert res["accuracy"] == 0.5 and res["unscored"] == 1
    with pytest.raises(ValueError, match="human_vote"):
        adiee_genai_bench_accuracy([{"human_vote": "tie", "score_a": 1.0, "score_b": 1.0}])


def test_adiee_question_per_sample_is_seeded_by_content_and_uses_every_line():
    from editlens.adiee.evaluator import question_index

    picks = [question_index(7, f"s{i}", f"e{i}", "add a cat", 4) for i in range(200)]
    assert set(picks) == {0, 1, 2, 3}
    assert picks == [question_index(7, f"s{i}", f"e{i}", "add a cat", 4) for i in range(200)]  # same on rerun
    assert picks != [question_index(8, f"s{i}", f"e{i}", "add a cat", 4) for i in range(200)]  # the seed matters


def test_adiee_score_in_bfloat16_as_released():
    import torch

    from editlens.adiee.model import decode_scores

    out = torch.tensor([[0.1, 0.7, 1.3]])
    assert decode_scores(out, "class3").item() == pytest.approx(6.8887, abs=1e-4)
    assert decode_scores(out, "class3", torch.bfloat16).item() == 6.875  # a bf16 step, as the release computes


def test_adiee_evaluator_records_question_and_score_dtype(tiny_vlm_dirs, tmp_path):
    from PIL import Image

    from editlens.adiee.checkpoint import save_released, scorer_from_base
    from editlens.core.types import EditSample
    from editlens.metrics.registry import create_metric

    ckpt = save_released(scorer_from_base(str(tiny_vlm_dirs["llava_next"]), device="cpu"), tmp_path / "ckpt")
    q = tmp_path / "q.txt"
    q.write_text("First question about $instruction?\nSecond question about $instruction?\n")
    rng = np.random.default_rng(0)
    samples = []
    for i in range(6):
        for n in ("s", "e"):
            Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(tmp_path / f"{n}{i}.png")
        samples.append(EditSample(f"x{i}", str(tmp_path / f"s{i}.png"), str(tmp_path / f"e{i}.png"), f"edit {i}").load())
    ev = create_metric("adiee", models={"adiee": str(ckpt)}, device="cpu", cache="none", image_side=32,
                       require_token=False, questions=str(q), question_seed=3, batch_size=1)
    scores = ev.score_batch(samples)
    assert {s.details["question_index"] for s in scores} == {0, 1}
    assert all(s.details["question_seed"] == 3 and s.details["score_dtype"] == "bfloat16" for s in scores)
    assert scores[0].details["identical_to_release"] is True


# -- size policy per evaluator -------------------------------------------------------------

def test_size_policy_per_evaluator_spec_as_released(tmp_path):
    from PIL import Image

    from editlens.core.types import EditSample, Score
    from editlens.metrics.base import Metric
    from editlens.metrics.registry import get_spec
    from editlens.metrics.spec import MetricSpec

    assert get_spec("adiee").size_policy == "native" and get_spec("editreward").size_policy == "native"
    assert get_spec("editscore").size_policy == "source"  # its benchmark resizes the output to the input's size
    assert get_spec("l1").size_policy == "source" and get_spec("adiee").to_dict()["size_policy"] == "native"
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(tmp_path / "s.png")
    Image.fromarray(np.full((20, 20, 3), 200, np.uint8)).save(tmp_path / "e.png")
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(tmp_path / "same.png")
    other = EditSample("x", str(tmp_path / "s.png"), str(tmp_path / "e.png"), "brighten").load()
    same = EditSample("y", str(tmp_path / "s.png"), str(tmp_path / "same.png"), "brighten").load()
    seen = {}

    class Sizes(Metric):
        def compute(self, batch):
            seen[self.spec.size_policy] = [s.edited.shape for s in batch]
            return [Score(self.spec.name, 1.0) for _ in batch]

    for policy in ("source", "native"):
        m = Sizes()
        m.spec = MetricSpec("sizes", Sizes, ("source", "edited"), True, (0, 1), size_policy=policy)
        out = m.score_batch([other, same])
        assert out[0].details["size_policy"] == policy and "size_policy" not in out[1].details
    assert seen["source"] == [(30, 40, 3), (30, 40, 3)] and seen["native"] == [(20, 20, 3), (30, 40, 3)]
    native = other.at_sizes("native")
    assert native.edited_hash != other.edited_hash and any("kept at its own size 20x20" in n for n in native.notes)
    with pytest.raises(ValueError):
        MetricSpec("bad", Sizes, ("source",), True, (0, 1), size_policy="stretch")


def test_editreward_qwen3_runs_at_the_processors_own_bounds_as_released(editreward_dirs, tmp_path):
    """The release's per-image pixel bounds never reach the Qwen3-VL processor (transformers' chat template drops
    them): images keep their own size within the processor's bounds; a forced size is named as a difference."""
    from PIL import Image

    from editlens.core.types import EditSample
    from editlens.metrics.registry import create_metric

    base, ckpt = editreward_dirs["q3"]
    ev = create_metric("editreward", model=str(ckpt), base=str(base), device="cpu", dtype="float32", cache="none")
    loaded = ev._load()
    assert ev.pixels(loaded)[0] is None
    assert not [d for d in ev.release(loaded)["differences"] if "pixels" in d]
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (64, 96, 3), dtype=np.uint8)).save(tmp_path / "s.png")
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / "e.png")
    (s,) = ev.score_batch([EditSample("x", str(tmp_path / "s.png"), str(tmp_path / "e.png"), "make it red").load()])
    assert s.status == "scored" and s.details["size_policy"] == "native"
    forced = create_metric("editreward", model=str(ckpt), base=str(base), device="cpu", dtype="float32",
                           cache="none", image_pixels=64 * 64)
    assert any("processor's own bounds" in d for d in forced.release(forced._load())["differences"])


def test_vifi_frames_resized_with_opencv_bilinear_without_antialiasing():
    import cv2
    from PIL import Image

    from editlens.twoframe.preprocess import FramePreprocess

    prep = FramePreprocess.for_size(224, "vifi")
    assert prep.interpolation == "bilinear-cv2" and prep.resize == 256
    img = np.random.default_rng(0).integers(0, 256, (512, 768, 3), dtype=np.uint8)
    want = cv2.resize(img, (384, 256), interpolation=cv2.INTER_LINEAR)[16:240, 80:304]
    assert np.array_equal(prep.crop(img), want)
    pil = np.asarray(Image.fromarray(img).resize((384, 256), Image.BILINEAR))[16:240, 80:304]
    assert not np.array_equal(pil, want)  # Pillow low-pass filters when shrinking: other pixels
    assert np.array_equal(FramePreprocess.for_size(224, "vifi", interpolation="bilinear").crop(img), pil)


def test_editscore_release_seeding_seeds_each_pass_42_plus_i_and_records_it(editscore_dirs):
    from editlens.metrics.registry import create_metric
    from editlens.testing import tiny_reward as TR

    base, adapter = editscore_dirs["q25"]
    ev = create_metric("editscore", model=f"{base}+{adapter}", device="cpu", dtype="float32", cache="none",
                       samples=3, seeding="release")
    from editlens.core.types import EditSample

    batch = [EditSample(f"s{i}", a, b, "add a hat").load() for i, (a, b) in enumerate(TR.tiny_edits(2))]
    reqs = ev.requests(batch)
    assert [r.settings.seed for r in reqs] == [42, 43, 44] * 4 and all(r.settings.n == 1 for r in reqs)
    scores = ev.score_batch(batch)
    for s in scores:
        assert s.status == "scored" and len(s.details["passes"]) == 3
        assert s.details["release"]["pass_seeds"] == [42, 43, 44] and s.details["release"]["seeding"] == "release"
    batched = create_metric("editscore", model=f"{base}+{adapter}", device="cpu", dtype="float32", cache="none",
                            samples=3)
    assert [(r.settings.seed, r.settings.n) for r in batched.requests(batch)] == [(42, 3)] * 4
    assert any("seeding=release" in d for d in batched.release()["differences"])
    with pytest.raises(ValueError, match="seeding"):
        create_metric("editscore", model=f"{base}+{adapter}", seeding="per-row")


def test_vifi_checkpoint_results_say_whether_they_are_the_releases(tmp_path):
    from editlens.core.types import EditSample
    from editlens.metrics.registry import create_metric
    from editlens.models.random_init import build_clip
    from editlens.testing.twoframe_models import write_original_checkpoint
    from editlens.twoframe.model import load_twoframe

    clip_dir = build_clip(tmp_path / "clip")
    tiny = load_twoframe(clip_dir, device="cpu", dtype="float32")
    path = write_original_checkpoint(tiny.clip, tmp_path / "vifi.pth", style="vifi")
    rng = np.random.default_rng(0)
    sample = EditSample("x", rng.integers(0, 256, (40, 48, 3), dtype=np.uint8),
                        rng.integers(0, 256, (40, 48, 3), dtype=np.uint8), "add a hat").load()
    kw = dict(model=str(path), tokenizer=str(clip_dir), base=str(clip_dir), device="cpu", dtype="float32")
    (s,) = create_metric("twoframe", **kw)([sample])
    assert s.details["identical_to_release"] is True and s.details["differences_from_release"] == []
    (raw,) = create_metric("twoframe", prompt="raw", **kw)([sample])
    assert raw.details["identical_to_release"] is False and "a photo of a" in raw.details["differences_from_release"][0]
