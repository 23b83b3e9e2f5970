"""Hostile judge answers through the CLI (score, run,
dice, dice-rank, dice-eval, runs summary) on an OpenAI-compatible server
whose model gives each case's answers. Every case is scored correctly or
recorded as unscored/failed with its reason; none becomes a made-up number."""

import json
import math

import numpy as np
import pytest
from PIL import Image
from scripted import ScriptedBackend
from servers import running
from typer.testing import CliRunner

from editlens.backends.server import build_app
from editlens.backends.types import Generation, TokenStep
from editlens.cli.main import app

CASES = ["good", "empty", "refusal", "prose", "scale", "truncated", "wrong_token", "qwen_boxes"]
REFUSAL = "I'm sorry, but I can't help with that."
LINE = "ADD: hat, [0.1, 0.1, 0.4, 0.4]"
CMD = {"ADD": math.log(0.7), "REMOVE": math.log(0.2), "EDIT": math.log(0.1)}


def _case(req) -> str:
    return CASES[int(req.images[0][-1, -1, 0]) // 20]


def _kind(req) -> str:
    text = " ".join(p for p in req.messages[0].parts if isinstance(p, str))
    if "ADD" in req.candidates:
        return "detect"
    if "ANSWER: YES" in text:
        return "coherence"
    return "yes_no" if req.candidates else "viescore"


def hostile(req) -> Generation:
    case, kind = _case(req), _kind(req)
    good = {"viescore": '{"reasoning": "ok", "score": [8, 6]}', "coherence": "Asked for.\nANSWER: YES",
            "detect": LINE}
    if case == "good" or (case in ("wrong_token", "qwen_boxes") and kind != "detect" and kind != "yes_no"):
        if kind == "yes_no":
            return Generation("YES", [TokenStep("YES", -0.2, {"YES": math.log(0.9), "NO": math.log(0.1)})], "stop")
        return Generation(good[kind], None, "stop")
    if case == "empty":
        return Generation("", None, "stop")
    if case == "refusal":
        return Generation(REFUSAL, None, "stop")
    if case == "prose":
        return Generation("The edit looks fine and YES the hat is there, NO doubt.", None, "stop")
    if case == "scale":
        return Generation({"viescore": "On the scale [0, 10] I give 7 and 8", "yes_no": "On a scale [0, 10]: 7",
                           "detect": "Coordinates go in [0, 1]. I see a hat.",
                           "coherence": "On a scale from NO to YES: mostly YES"}[kind], None, "stop")
    if case == "truncated":
        return Generation({"viescore": '{"reasoning": "the hat is', "yes_no": "Looking at the",
                           "detect": LINE + "\nREMOVE: dog, [0.5, 0.", "coherence": "The hat was"}[kind], None, "length")
    if case == "wrong_token":
        if kind == "yes_no":  # the step holds NO while the answer says YES: no P(YES) is read from it
            return Generation("YES", [TokenStep("NO", -0.2, {"YES": math.log(0.2), "NO": math.log(0.8)})], "stop")
        return Generation(LINE, [TokenStep("EDIT", -0.1, dict(CMD)), TokenStep(LINE[3:], -0.1, {})], "stop")
    if case == "qwen_boxes":
        if kind == "yes_no":
            return Generation("NO", None, "stop")
        return Generation("ADD: hat, [100, 100, 400, 400]", None, "stop")
    raise AssertionError(case)


@pytest.fixture(scope="module")
def server():
    with running(build_app(ScriptedBackend(hostile), "hostile")) as url:
        yield url


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    rows = []
    for k, case in enumerate(CASES):
        src = np.full((32, 32, 3), 20 * k + 5, np.uint8)
        edt = src.copy()
        edt[4:12, 4:12] = 255
        Image.fromarray(src).save(root / f"{case}_src.png")
        Image.fromarray(edt).save(root / f"{case}_edt.png")
        rows.append({"id": case, "source": f"{case}_src.png", "edited": f"{case}_edt.png",
                     "instruction": f"add a hat ({case})", "model": "M"})
    (root / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _cli(*args):
    res = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    return res


@pytest.mark.parametrize("case", CASES)
def test_score(case, server, manifest):
    res = _cli("score", "--source", manifest / f"{case}_src.png", "--edited", manifest / f"{case}_edt.png",
               "--instruction", "add a hat", "--metrics", "l1", "--judge", "viescore,yes_no", "--vlm", server,
               "--cache", "none", "--json", "--max-retries", "0")
    # an empty answer from a server is a lost answer: failed (exit 3), retried on rerun, never unscored
    assert res.exit_code == (3 if case == "empty" else 0), res.output
    scores = json.loads(res.stdout)["scores"]
    vs, yn = scores["viescore"], scores["yes_no"]
    if case == "empty":
        for s in (vs, yn):
            assert s["status"] == "failed" and "empty content" in s["reason"] and s["value"] is None
        return
    if case in ("good", "wrong_token", "qwen_boxes"):
        assert vs["status"] == "scored" and vs["value"] == pytest.approx(math.sqrt(6 * 6) / 10)
    else:
        assert vs["status"] == "unscored" and vs["value"] is None and vs["reason"] and "raw" in vs["details"]
    if case == "good":
        assert yn["value"] == pytest.approx(0.9) and yn["details"]["p_yes_from"] == "logprobs"
    elif case == "wrong_token":
        # the stated answer is the only evidence: said so in details, not P(YES) of the wrong token
        assert yn["value"] == 1.0 and yn["details"]["p_yes_from"] == "text"
    elif case == "qwen_boxes":
        assert yn["value"] == 0.0
    else:
        assert yn["status"] == "unscored" and yn["value"] is None and yn["reason"]
    if case == "refusal":
        assert "refused" in vs["reason"] and "refused" in yn["reason"]


def test_run_dice_rank_and_eval(server, manifest, tmp_path):
    out = tmp_path / "run"
    res = _cli("run", manifest / "manifest.jsonl", "--out", out, "--metrics", "l1", "--dice", "--vlm", server,
               "--cache", "none", "--no-progress", "--max-retries", "0")
    assert res.exit_code == 3 and "1 result(s) failed" in res.output, res.output  # the empty answer
    rec = {json.loads(x)["id"]: json.loads(x)["scores"]["dice"] for x in open(out / "results.jsonl")}
    assert rec["good"]["status"] == "scored" and rec["good"]["value"] == 1.0
    assert rec["good"]["details"]["differences"][0]["confidence"] is None  # no logprobs from this server answer
    wt = rec["wrong_token"]["details"]["differences"][0]
    assert rec["wrong_token"]["status"] == "scored" and wt["confidence"] is None
    assert wt["confidence_source"].startswith("unavailable")
    assert rec["empty"]["status"] == "failed" and "empty content" in rec["empty"]["reason"]
    for case in ("refusal", "prose", "scale", "qwen_boxes"):
        assert rec[case]["status"] == "unscored" and rec[case]["value"] is None and rec[case]["reason"], case
        assert rec[case]["details"]["no_change"] is False
    assert "refused" in rec["refusal"]["reason"] and "--boxes" in rec["qwen_boxes"]["reason"]
    assert rec["truncated"]["status"] == "unscored" and rec["truncated"]["details"]["truncated"]

    rank = _cli("dice-rank", out, "--json")
    (row,) = json.loads(rank.stdout)
    assert (row["samples"], row["ranked"], row["unscored"], row["truncated"]) == (8, 2, 5, 1)
    assert row["no_visual_change"] == 0.0 and row["correct_edits"] == 100.0

    # ground truth in pixels: stated, checked, converted
    gt = tmp_path / "gt.jsonl"
    gt.write_text(json.dumps({"id": "good", "width": 32, "height": 32,
                              "differences": [{"command": "ADD", "box": [3.2, 3.2, 12.8, 12.8], "coherent": True}]})
                  + "\n")
    bad = _cli("dice-eval", "--gt", gt, "--predictions", out / "results.jsonl")
    assert bad.exit_code == 2 and "gt.jsonl:1: difference 1" in bad.output and "pixels" in bad.output
    ev = _cli("dice-eval", "--gt", gt, "--predictions", out / "results.jsonl", "--gt-boxes", "pixels", "--json")
    rep = json.loads(ev.stdout)
    assert rep["class_agnostic"]["AP50"] == pytest.approx(1.0)
    assert rep["predictions_without_usable_answer"]["n"] == 6  # unparsable or truncated, reported

    # with the model's convention stated, the Qwen-style answer is read correctly
    out2 = tmp_path / "run2"
    res = _cli("run", manifest / "manifest.jsonl", "--out", out2, "--metrics", "l1", "--dice", "--vlm", server,
               "--cache", "none", "--no-progress", "--option", "dice.boxes=per-mille", "--max-retries", "0")
    rec2 = {json.loads(x)["id"]: json.loads(x)["scores"]["dice"] for x in open(out2 / "results.jsonl")}
    assert rec2["qwen_boxes"]["status"] == "scored"
    assert rec2["qwen_boxes"]["details"]["differences"][0]["box"] == [0.1, 0.1, 0.4, 0.4]


def test_all_unparsable_run_ranks_nothing(server, manifest, tmp_path):
    lines = [x for x in open(manifest / "manifest.jsonl") if json.loads(x)["id"] in ("empty", "refusal", "prose", "scale")]
    m = manifest / "unparsable.jsonl"
    m.write_text("".join(lines))
    out = tmp_path / "bad"
    res = _cli("run", m, "--out", out, "--metrics", "l1", "--dice", "--vlm", server, "--cache", "none", "--no-progress",
               "--max-retries", "0", "--allow-failures")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(_cli("dice-rank", out, "--json").stdout)
    assert row["ranked"] == 0 and row["unscored"] == 4 and row["no_visual_change"] is None
    summary = _cli("runs", "summary", out).stdout
    table = summary[summary.index("DICE ranking"):].splitlines()
    header, values = table[1].split(), table[2].split()
    got = dict(zip(header, values))
    assert got["ranked"] == "0" and got["unscored"] == "4" and got["no_visual_change"] == "-"


def test_dice_command(server, manifest):
    def dice(case, *extra, code=0):
        res = _cli("dice", "--source", manifest / f"{case}_src.png", "--edited", manifest / f"{case}_edt.png",
                   "--instruction", "add a hat", "--vlm", server, "--cache", "none", *extra)
        assert res.exit_code == code, res.output
        return res.stdout

    # an unparsable answer is no result: exit 1, as `editlens compare`
    assert "unscored: model refused" in dice("refusal", code=1)
    assert "incomplete: answer cut off" in dice("truncated")
    assert "box [0.1, 0.1, 0.4, 0.4]" in dice("qwen_boxes", "--boxes", "per-mille")
    assert "unscored" in dice("qwen_boxes", code=1) and "--boxes" in dice("qwen_boxes", code=1)
    assert "confidence n/a" in dice("wrong_token")
    doc = json.loads(dice("prose", "--json", code=1))
    assert doc["unparsable"] and doc["raw"].startswith("The edit looks fine")


def test_compare_with_samples(server, manifest):
    img = lambda c: manifest / f"{c}_src.png"  # noqa: E731
    res = _cli("compare", "--source", img("good"), "--edited-a", img("good"), "--edited-b", img("good"),
               "--instruction", "add a hat", "--vlm", server, "--cache", "none", "--samples", "3",
               "--temperature", "0.5", "--orders", "forward", "--json")
    doc = json.loads(res.stdout)
    # a JSON score answer is not a [[...]] verdict: no verdict, with the reason and every answer kept
    assert doc["verdict"] is None and "no sampled answer had a verdict" in doc["reason"]
    assert doc["ensemble"]["samples"] == 3 and len(doc["raw"]) == 3
    bad = _cli("compare", "--source", img("good"), "--edited-a", img("good"), "--edited-b", img("good"),
               "--instruction", "add a hat", "--vlm", server, "--samples", "3")
    assert bad.exit_code == 2 and "needs temperature > 0" in bad.output
