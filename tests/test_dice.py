"""DICE: parsing, confidence, drawing, ranking, masked CLIP, AP, and the pipeline end to end."""

import json
import math

import numpy as np
import pytest
from helpers import EXAMPLES, rng_image
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted import ScriptedBackend
from typer.testing import CliRunner

from editlens.backends.types import Generation, TokenStep
from editlens.core.types import EditSample
from editlens.dice.confidence import assign_confidence
from editlens.dice.drawing import COLOURS, draw_differences
from editlens.dice.evaluation import coco_ap, coherence_accuracy, evaluate_detection
from editlens.dice.parsing import parse_differences
from editlens.dice.pipeline import DicePipeline
from editlens.dice.ranking import rank_models, union_area
from editlens.dice.types import Difference

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=1, max_size=20).map(str.strip).filter(bool)
coord = st.floats(min_value=0.0, max_value=1.0, allow_nan=False).map(lambda v: round(v, 3))
diff = st.tuples(st.sampled_from(["ADD", "REMOVE", "EDIT"]), words, coord, coord, coord, coord).filter(
    lambda t: abs(t[2] - t[4]) > 0.01 and abs(t[3] - t[5]) > 0.01)


@settings(max_examples=80, deadline=None)
@given(st.lists(diff, min_size=1, max_size=5, unique_by=lambda t: t[0]), st.sampled_from(["lines", "json", "spaces"]))
def test_parse_round_trip(items, style):
    lines = [f"{c}: {o}, [{a}, {b}, {x}, {y}]" for c, o, a, b, x, y in items]
    if style == "json":
        text = json.dumps(lines)
    elif style == "spaces":
        text = "\n".join(line.replace(":", "  :  ").replace(",", " ,  ") for line in lines)
    else:
        text = "\n".join(lines)
    got = parse_differences(text)
    assert [d.command for d in got] == [t[0] for t in items]
    for d, (_, o, a, b, x, y) in zip(got, items):
        assert d.object == o.strip()
        assert d.box == pytest.approx((min(a, x), min(b, y), max(a, x), max(b, y)))
        assert ("corners swapped" in d.flags) == (a > x or b > y)


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,!?", max_size=80))
def test_prose_without_differences_is_unparsable(text):
    got = parse_differences(text)
    assert got is None or got == []  # [] only for an explicit "none"-style answer


def test_pixels_clamping_duplicates():
    text = "ADD: cat, [100, 50, 300, 250]\nADD: cat, [100, 50, 300, 251]"
    (a,) = parse_differences(text, size=(400, 500), convention="pixels")
    assert a.box == pytest.approx((0.25, 0.1, 0.75, 0.5)) and "duplicates merged" in a.flags
    (e,) = parse_differences("EDIT: sky, [-0.03, 0, 0.5, 1.04]")
    assert e.box == (0.0, 0.0, 0.5, 1.0) and "clamped to the image" in e.flags
    # pixels but no image size: nothing can be located, so unparsable (not "no change")
    assert parse_differences("ADD: cat, [100, 50, 300, 250]", convention="pixels") is None
    # numbers past 1 in the fraction convention are not silently taken for pixels
    assert parse_differences(text, size=(400, 500)) is None
    assert parse_differences("None.") == [] and parse_differences("No differences") == []


def test_confidence_from_known_logits():
    text = "ADD: cat, [0.1, 0.1, 0.2, 0.2]\nREMOVE: dog, [0.5, 0.5, 0.6, 0.6]"
    toks = ["ADD", ": cat, [0.1, 0.1, 0.2, 0.2]\n", "REMOVE", ": dog, [0.5, 0.5, 0.6, 0.6]"]
    assert "".join(toks) == text
    lp = lambda a, r, e: {"ADD": math.log(a), "REMOVE": math.log(r), "EDIT": math.log(e)}  # noqa: E731
    gen = Generation(text, [TokenStep(toks[0], -0.1, lp(0.6, 0.2, 0.1)), TokenStep(toks[1], -0.1, {}),
                            TokenStep(toks[2], -0.1, lp(0.1, 0.3, 0.1)), TokenStep(toks[3], -0.1, {})])
    diffs = parse_differences(text)
    assign_confidence(gen, diffs)
    assert diffs[0].confidence == pytest.approx(0.6 / 0.9) and diffs[1].confidence == pytest.approx(0.3 / 0.5)
    assert diffs[0].confidence_source == "logprobs"
    no_lp = parse_differences(text)
    assign_confidence(Generation(text), no_lp)
    assert no_lp[0].confidence is None and "unavailable" in no_lp[0].confidence_source


def test_boxes_drawn_where_the_paper_puts_them():
    src = np.full((100, 100, 3), 128, np.uint8)
    edt = src.copy()
    diffs = [Difference("ADD", "a", (0.1, 0.1, 0.3, 0.3)), Difference("EDIT", "b", (0.5, 0.5, 0.7, 0.7)),
             Difference("REMOVE", "c", (0.1, 0.6, 0.3, 0.9))]
    s, e = draw_differences(src, edt, diffs, line=2)
    # ADD: red on the edited image only
    assert tuple(e[10, 20]) == COLOURS["ADD"] and tuple(s[10, 20]) == (128, 128, 128)
    # EDIT: green on the original only
    assert tuple(s[50, 60]) == COLOURS["EDIT"] and tuple(e[50, 60]) == (128, 128, 128)
    # REMOVE: blue on the original only
    assert tuple(s[59, 20]) == COLOURS["REMOVE"] and tuple(e[59, 20]) == (128, 128, 128)
    assert tuple(s[20, 20]) == (128, 128, 128)  # inside the ADD box, nothing on the original


def test_ranking_arithmetic():
    coh = lambda c, box: {"command": "ADD", "box": box, "verdict": {"coherent": c}}  # noqa: E731
    recs = [
        ("M1", {"differences": [coh(True, [0, 0, 0.5, 0.5]), coh(False, [0.5, 0.5, 1, 1])]}),  # correct, 25% unwanted
        ("M1", {"differences": [coh(False, [0, 0, 1, 0.5])]}),  # not correct, 50% unwanted
        ("M1", {"differences": []}),  # no change
        ("M2", {"differences": [coh(True, [0, 0, 1, 1])]}),
    ]
    m1, m2 = rank_models(recs)
    assert m1["correct_edits"] == pytest.approx(100 / 3) and m1["unwanted_edits"] == pytest.approx(25.0)
    assert m1["no_visual_change"] == pytest.approx(100 / 3)
    assert {k: m2[k] for k in ("model", "samples", "ranked", "correct_edits", "unwanted_edits", "no_visual_change")} \
        == {"model": "M2", "samples": 1, "ranked": 1, "correct_edits": 100.0, "unwanted_edits": 0.0,
            "no_visual_change": 0.0}
    assert union_area([[0, 0, 0.5, 1], [0, 0, 0.5, 1]]) == 0.5


def _scripted_dice(detection, coherence="Looks right.\nANSWER: YES"):
    return ScriptedBackend(lambda r: detection if len(r.candidates) == 3 else coherence)


def test_pipeline_with_scripted_vlm():
    pipe = DicePipeline(vlm="scripted")
    pipe._backend = _scripted_dice("ADD: a hat, [0.1, 0.1, 0.4, 0.4]\nEDIT: the sky, [0, 0, 1, 0.3]",
                                   "The hat was requested. ANSWER: YES")
    s = EditSample("x", rng_image(0), rng_image(1), "add a hat").load()
    (res,) = pipe.run([s])
    assert [d.command for d in res.differences] == ["ADD", "EDIT"]
    assert [v.coherent for v in res.verdicts] == [True, True]
    assert res.verdicts[0].reasoning == "The hat was requested."
    unparsable = DicePipeline(vlm="scripted")
    unparsable._backend = _scripted_dice("I see a hat somewhere")
    (bad,) = unparsable.run([s])
    assert bad.unparsable and bad.raw == "I see a hat somewhere"


def test_dice_masked_clip(tiny_clip_dir):
    from editlens.dice.pipeline import DiceCLIPImage, DiceCLIPText
    from editlens.metrics.registry import get_spec

    src = rng_image(0, 64, 64)
    edt = src.copy()
    edt[:, :32] = 0  # the requested change: the left half
    s = EditSample("x", src, edt, "blacken the left half", target_caption="a black and white picture").load()
    m = DiceCLIPImage(vlm="scripted", models={"clip": str(tiny_clip_dir)})
    m.spec, m.options = get_spec("dice_clip_i"), {}
    m.pipeline._backend = _scripted_dice("EDIT: left half, [0, 0, 0.5, 1]")
    assert m([s])[0].value == pytest.approx(1.0, abs=1e-6)  # coherent change patched: backgrounds equal
    t = DiceCLIPText(vlm="scripted", models={"clip": str(tiny_clip_dir)})
    t.spec, t.options = get_spec("dice_clip_t"), {}
    t.pipeline._backend = _scripted_dice("EDIT: left half, [0, 0, 0.5, 1]", "ANSWER: NO")
    from editlens.metrics import functional as F
    from editlens.models.encoders import get_encoder

    enc = get_encoder("clip", overrides={"clip": str(tiny_clip_dir)})
    patched = edt.copy()
    patched[:, :32] = 128
    expected = F.cosine(enc.encode_images([patched]), enc.encode_texts(["a black and white picture"]))[0]
    assert t([s])[0].value == pytest.approx(float(expected), abs=1e-6)


def test_ap_hand_computed_cases():
    gt = [{"id": "a", "width": 100, "height": 100,
           "differences": [{"command": "ADD", "box": [0.1, 0.1, 0.5, 0.5], "coherent": True}]}]
    exact = {"a": [{"command": "ADD", "box": [0.1, 0.1, 0.5, 0.5], "confidence": 0.8, "verdict": {"coherent": True}}]}
    rep = evaluate_detection(gt, exact)
    assert rep["class_agnostic"]["AP"] == pytest.approx(1.0) and rep["class_aware"]["per_command"]["ADD"] == pytest.approx(1.0)
    assert rep["coherence_ap"]["AP"] == pytest.approx(1.0)
    # a higher-scored false positive before the true positive: precision 1/2 at recall 1 -> AP 0.5
    fp_first = {"a": [{"command": "ADD", "box": [0.6, 0.6, 0.9, 0.9], "confidence": 0.9},
                      {"command": "ADD", "box": [0.1, 0.1, 0.5, 0.5], "confidence": 0.8}]}
    assert coco_ap(gt, fp_first, lambda d, g: 1)["AP"] == pytest.approx(0.5)
    # right place, wrong command: class-agnostic hit, class-aware miss
    wrong_cmd = {"a": [{"command": "EDIT", "box": [0.1, 0.1, 0.5, 0.5], "confidence": 0.8}]}
    rep = evaluate_detection(gt, wrong_cmd)
    # COCO averages over categories with ground truth: only ADD, which got no detection
    assert rep["class_agnostic"]["AP"] == pytest.approx(1.0) and rep["class_aware"]["AP"] == pytest.approx(0.0)
    assert rep["class_aware"]["per_command"]["ADD"] == 0.0 and rep["class_aware"]["per_command"]["EDIT"] is None
    # IoU 0.625: a hit at thresholds 0.50, 0.55, 0.60, a miss from 0.65 up -> AP50 1, AP75 0, AP 3/10
    shifted = {"a": [{"command": "ADD", "box": [0.1, 0.1, 0.5, 0.35], "confidence": 0.8}]}  # IoU 0.625
    r = coco_ap(gt, shifted, lambda d, g: 1)
    assert r["AP50"] == pytest.approx(1.0) and r["AP75"] == pytest.approx(0.0) and r["AP"] == pytest.approx(0.3)
    # the ground-truth box is 40 x 40 px = 1600 px^2: COCO's "medium" bucket (32^2 to 96^2)
    assert r["APs"] is None and r["APm"] == pytest.approx(0.3) and r["APl"] is None


def test_missing_confidence_is_counted():
    gt = [{"id": "a", "width": 10, "height": 10, "differences": [{"command": "ADD", "box": [0, 0, 1, 1]}]}]
    r = coco_ap(gt, {"a": [{"command": "ADD", "box": [0, 0, 1, 1], "confidence": None}]}, lambda d, g: 1)
    assert r["n_without_confidence"] == 1 and r["AP"] == pytest.approx(1.0)


def test_coherence_accuracy():
    gt = [{"id": "a", "differences": [{"coherent": True}, {"coherent": False}, {"coherent": True}]}]
    r = coherence_accuracy(gt, {"a": [True, True, None]})
    assert r == {"accuracy": pytest.approx(1 / 3), "n": 3, "unparsable": 1, "missing": 0}


def test_cli_dice_model_free_and_draw(tmp_path):
    from editlens.cli.main import app

    res = CliRunner().invoke(app, ["dice", "--source", str(EXAMPLES / "images" / "cat_seat_source.png"),
                                   "--edited", str(EXAMPLES / "images" / "cat_seat_edited.png"),
                                   "--instruction", "Put a cat on the seat.", "--draw", str(tmp_path), "--json"],
                             catch_exceptions=False)
    doc = json.loads(res.stdout)
    assert doc["detector"] == "changemap" and doc["differences"][0]["command"] == "CHANGE"
    assert (tmp_path / "source_boxes.png").exists() and (tmp_path / "edited_boxes.png").exists()


def test_cli_run_dice_with_tiny_vlm_and_ranking(tiny_vlm_dirs, tmp_path):
    from editlens.cli.main import app

    out = tmp_path / "r"
    res = CliRunner().invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out), "--metrics", "l1",
                                   "--dice", "--vlm", str(tiny_vlm_dirs["qwen2_vl"]), "--no-progress"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in open(out / "results.jsonl")]
    # noise from a random model: recorded as unscored with the raw answer, never as a number
    for r in records:
        d = r["scores"]["dice"]
        assert d["status"] in ("scored", "unscored") and (d["status"] == "scored" or "raw" in d["details"])
    summary = CliRunner().invoke(app, ["runs", "summary", str(out), "--by", "model"], catch_exceptions=False)
    assert "DICE ranking" in summary.stdout and "ground_truth" in summary.stdout


def test_cli_dice_through_serve(tiny_vlm_dirs, tmp_path):
    from servers import running

    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import build_app
    from editlens.cli.main import app

    with running(build_app(TransformersBackend(str(tiny_vlm_dirs["llava_next"])), "tiny")) as url:
        res = CliRunner().invoke(app, ["dice", "--source", str(EXAMPLES / "images" / "hydrant_source.png"),
                                       "--edited", str(EXAMPLES / "images" / "hydrant_edited.png"),
                                       "--instruction", "Put the hydrant on asphalt.", "--vlm", url, "--json"],
                                 catch_exceptions=False)
        doc = json.loads(res.stdout)
        assert res.exit_code == (1 if doc.get("unparsable") else 0), res.output  # unparsable: exit 1, as compare
        assert doc["detector"] == "mllm"
        # a random model's answer is noise: parsed differences or an honest unscored record with the raw text
        assert doc["differences"] or "raw" in doc
        out = tmp_path / "r"
        res = CliRunner().invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out), "--metrics", "l1",
                                       "--dice", "--vlm", url, "--no-progress"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    rank = CliRunner().invoke(app, ["dice", "rank", str(out), "--json"], catch_exceptions=False)
    rows = {r["model"]: r for r in json.loads(rank.stdout)}
    assert set(rows) == {"ground_truth", "no_op"} and rows["ground_truth"]["samples"] == 4


def test_cli_dice_eval_with_gt_judging(tiny_vlm_dirs, tmp_path):
    from editlens.cli.main import app

    gt = tmp_path / "gt.jsonl"
    gt.write_text(json.dumps({"id": "a", "width": 320, "height": 320,
                              "source": str(EXAMPLES / "images" / "cat_seat_source.png"),
                              "edited": str(EXAMPLES / "images" / "cat_seat_edited.png"),
                              "instruction": "Put a cat on the seat.",
                              "differences": [{"command": "ADD", "object": "cat", "box": [0.4, 0.35, 0.75, 0.7],
                                               "coherent": True}]}) + "\n")
    preds = tmp_path / "p.jsonl"
    preds.write_text(json.dumps({"id": "a", "differences": [{"command": "CHANGE", "box": [0.41, 0.32, 0.75, 0.7],
                                                             "confidence": 0.66}]}) + "\n")
    res = CliRunner().invoke(app, ["dice", "eval", "--gt", str(gt), "--predictions", str(preds), "--judge-gt",
                                   "--vlm", str(tiny_vlm_dirs["idefics3"]), "--json"], catch_exceptions=False)
    rep = json.loads(res.stdout)
    assert rep["class_agnostic"]["AP50"] == pytest.approx(1.0)
    assert rep["coherence_accuracy"]["n"] == 1  # the random model's verdict is noise, but it was asked


def test_dice_and_change_map_computed_once_per_sample(tiny_clip_dir):
    from editlens.metrics.registry import create_metric

    s = EditSample("x", str(EXAMPLES / "images" / "cat_seat_source.png"),
                   str(EXAMPLES / "images" / "cat_seat_edited.png"), "Put a cat on the seat.").load()
    cm = create_metric("change_map")([s])[0]
    dice = create_metric("dice")([s])[0]  # model-free detector reuses the sample's change map
    assert [d["box"] for d in dice.details["differences"]] == [r["box_norm"] for r in cm.details["regions"]]
    assert sum(1 for k in s.derived if k[0] == "change_map") == 1

    backend = _scripted_dice("ADD: a cat, [0.4, 0.3, 0.75, 0.7]")
    s2 = EditSample("y", rng_image(0), rng_image(1), "add a cat").load()
    dice_m = create_metric("dice", vlm="scripted")
    masked = create_metric("dice_clip_i", vlm="scripted", models={"clip": str(tiny_clip_dir)})
    dice_m.pipeline._backend = masked.pipeline._backend = backend  # one backend, as one --vlm gives
    dice_m([s2])
    calls = backend.calls
    masked([s2])
    assert backend.calls == calls  # the DICE-masked metric reused the sample's DICE result
