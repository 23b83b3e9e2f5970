"""DICE verdicts that cannot be understood are counted apart, never
as "no visual change" (items 2, 6, 9), and inputs that must score (8, 11)."""

import json

import numpy as np
import pytest
from helpers import rng_image
from scripted import ScriptedBackend

from editlens.backends.families import box_convention
from editlens.backends.types import Generation
from editlens.core.types import EditSample
from editlens.dice.evaluation import evaluate_detection, load_ground_truth
from editlens.dice.parsing import parse_differences, parse_differences_detailed
from editlens.dice.ranking import rank_models
from editlens.errors import InputError
from editlens.metrics.registry import create_metric
from editlens.models.registry import families


def _dice(detection, coherence="ok\nANSWER: YES", describe=None):
    be = ScriptedBackend(lambda r: detection if len(r.candidates) == 3 else coherence)
    if describe:
        be.describe = lambda: describe
    return be


def _metric(backend, **kw):
    m = create_metric("dice", vlm="scripted", **kw)
    m.pipeline._backend = backend
    return m


S = EditSample("x", rng_image(0), rng_image(1), "add a hat")


# -- item 2: ranking ------------------------------------------------------------------
def test_all_unparsable_ranks_nothing():
    unparsable = {"detector": "mllm", "differences": [], "no_change": False, "unparsable": True,
                  "raw": "I see a hat", "problem": "no line"}
    legacy = {"detector": "mllm", "differences": [], "no_change": False, "raw": "??", "problem": "no line"}
    (row,) = rank_models([("M", unparsable), ("M", legacy)])
    assert row["ranked"] == 0 and row["unscored"] == 2
    assert row["no_visual_change"] is None and row["correct_edits"] is None


def test_partly_judged_counted_apart():
    v = lambda c: {"command": "ADD", "box": [0, 0, 0.5, 0.5], "verdict": {"coherent": c}}  # noqa: E731
    rows = rank_models([("M", {"differences": [v(True), v(None)]}), ("M", {"differences": [v(False)]}),
                        ("M", {"differences": [], "no_change": True})])
    (r,) = rows
    assert (r["samples"], r["ranked"], r["partly_judged"]) == (3, 2, 1)
    assert r["correct_edits"] == 0.0 and r["no_visual_change"] == 50.0 and r["unwanted_edits"] == pytest.approx(12.5)


# -- item 6: truncated detector answers --------------------------------------------------------
def test_truncated_difference_list_is_not_complete():
    g = Generation("ADD: hat, [0.1, 0.1, 0.4, 0.4]\nREMOVE: dog, [0.5, 0.", None, "length")
    (s,) = _metric(_dice(g))([S.load()])
    assert s.status == "unscored" and "cut off" in s.reason and s.details["truncated"]
    assert len(s.details["differences"]) == 1 and s.details["no_change"] is False
    assert rank_models([("M", s.details)])[0]["truncated"] == 1
    empty = Generation("The pictures differ in", None, "length")
    (e,) = _metric(_dice(empty))([S.load()])
    assert e.status == "unscored" and e.details["no_change"] is False


# -- item 9: box conventions as data ---------------------------------------------------------
def test_box_conventions_come_from_the_family_table():
    assert families()["qwen2_vl"].boxes == "per-mille" and families()["idefics3"].boxes == "fraction"
    assert box_convention({"model_type": "qwen2_vl"}) == "per-mille"
    assert box_convention({"backend": "openai-http"}) == "fraction"


def test_qwen_boxes_read_in_per_mille_never_guessed():
    text = "ADD: hat, [100, 200, 500, 800]"
    (d,) = parse_differences(text, (640, 480), convention="per-mille")
    assert d.box == pytest.approx((0.1, 0.2, 0.5, 0.8))
    # the same answer read as fractions is rejected with the reason, not taken for pixels
    parsed = parse_differences_detailed(text, (640, 480))
    assert parsed.differences is None and "outside the image in the fraction convention" in parsed.rejected[0]
    # through the pipeline: the backend's family decides, and the prompt asks for that convention
    be = _dice(text, describe={"model_type": "qwen2_vl"})
    (s,) = _metric(be)([S.load()])
    assert s.details["differences"][0]["box"] == [0.1, 0.2, 0.5, 0.8]
    assert "thousandths" in be.requests[0].messages[0].parts[-1]
    (u,) = _metric(_dice(text))([S.load()])  # unknown family: fraction, so unscored with the reason
    assert u.status == "unscored" and "--boxes" in u.reason


def test_ground_truth_boxes_validated(tmp_path):
    row = {"id": "a", "width": 200, "height": 100, "differences": [{"command": "ADD", "box": [20, 10, 100, 50]}]}
    p = tmp_path / "gt.jsonl"
    p.write_text("\n" + json.dumps(row) + "\n")
    with pytest.raises(InputError, match=r"gt.jsonl:2: difference 1: box .* outside \[0, 1\].*pixels"):
        load_ground_truth(p)
    (g,) = load_ground_truth(p, "pixels")
    assert g["differences"][0]["box"] == pytest.approx([0.1, 0.1, 0.5, 0.5])
    row["differences"][0]["box"] = [20, 10, 300, 50]
    p.write_text(json.dumps({**row, "box_units": "pixels"}) + "\n")
    with pytest.raises(InputError, match=r":1: difference 1: pixel box .* outside the 200x100 image"):
        load_ground_truth(p)


def test_coherence_ap_counts_unjudged_detections():
    gt = [{"id": "a", "width": 100, "height": 100,
           "differences": [{"command": "ADD", "box": [0.1, 0.1, 0.5, 0.5], "coherent": True}]}]
    preds = {"a": [{"command": "ADD", "box": [0.1, 0.1, 0.5, 0.5], "confidence": 0.9, "verdict": {"coherent": True}},
                   {"command": "EDIT", "box": [0.6, 0.6, 0.9, 0.9], "confidence": 0.8, "verdict": {}}]}
    rep = evaluate_detection(gt, preds)
    assert rep["coherence_ap"]["n_pred_unjudged"] == 1 and rep["coherence_ap"]["n_pred"] == 1


# -- item 8 and 11: inputs that must score ------------------------------------------------------
def test_clip_d_of_unchanged_edit_is_zero(tiny_clip_dir):
    img = rng_image(3)
    s = EditSample("x", img, img.copy(), "make it a dog", source_caption="a cat", target_caption="a dog").load()
    (out,) = create_metric("clip_d", models={"clip": str(tiny_clip_dir)})([s])
    assert out.status == "scored" and out.value == 0.0
    same = EditSample("y", img, rng_image(4), "x", source_caption="a cat", target_caption="a cat").load()
    (sk,) = create_metric("clip_d", models={"clip": str(tiny_clip_dir)})([same])
    assert sk.status == "skipped" and "captions" in sk.reason


def test_tiny_image_skips_ssim_only():
    from editlens.runner.scoring import score_edit

    a = np.zeros((1, 1, 3), np.uint8)
    b = np.full((1, 1, 3), 200, np.uint8)
    rep = score_edit(a, b, "brighten", metrics=["ssim", "l1", "psnr"])
    assert rep["ssim"].status == "skipped" and "smaller than SSIM's 7x7 window" in rep["ssim"].reason
    assert rep["l1"].value == pytest.approx(200 / 255) and rep["psnr"].status == "scored"


def test_dice_coherence_self_ensembling_through_the_pipeline():
    answers = {0: "ok\nANSWER: YES", 1: "no\nANSWER: NO", 2: "fine\nANSWER: YES"}
    be = ScriptedBackend(lambda r: LINE if len(r.candidates) == 3 else answers[r.settings.seed])
    m = _metric(be, samples=3, temperature=0.6)
    (s,) = m([S.load()])
    v = s.details["differences"][0]["verdict"]
    assert s.status == "scored" and v["coherent"] is True and v["ensemble"]["agreement"] == pytest.approx(2 / 3)
    seeds = sorted(r.settings.seed for r in be.requests if len(r.candidates) == 2)
    assert seeds == [0, 1, 2]
    assert [r.settings.temperature for r in be.requests if len(r.candidates) == 3] == [0.0]  # detection stays greedy


LINE = "ADD: hat, [0.1, 0.1, 0.4, 0.4]"
