"""Judges: parsing and scoring logic on a scripted backend, and end to end
on tiny random VLMs (locally and through `editlens serve`)."""

import json
import math

import pytest
from helpers import EXAMPLES, rng_image
from scripted import ScriptedBackend
from servers import running
from typer.testing import CliRunner

from editlens.backends.types import Generation, TokenStep
from editlens.core.types import EditSample
from editlens.judges.captioner import Captioner
from editlens.judges.pairwise import PairwiseJudge
from editlens.judges.parsing import parse_object, parse_scores, parse_verdict, parse_yes_no
from editlens.judges.templates import load_template
from editlens.judges.viescore import VIEScoreJudge
from editlens.judges.yesno import YesNoJudge


@pytest.mark.parametrize("text,expected", [
    ('{"reasoning": "good", "score": [7, 8]}', ([7.0, 8.0], "good")),
    ("```json\n{'score': [3, 10], 'reasoning': 'python style'}\n```", ([3.0, 10.0], "python style")),
    ('Here you go: {"score": "[5, 6]"} thanks', ([5.0, 6.0], None)),
    ("score: [9, 2]", ([9.0, 2.0], None)),
    ('{"score": [7]}', None),  # wrong count
    ('{"score": [7, 11]}', None),  # out of range
    ("seven and eight", None),
    ("", None),
])
def test_parse_scores(text, expected):
    assert parse_scores(text) == expected


def test_parse_helpers():
    assert parse_object('noise {"a": 1} noise') == {"a": 1}
    assert parse_verdict("A is sharper.\n[[A>>B]]") == "A>B"
    assert parse_verdict("[[A=B=Bad]]") == "A=B=Bad" and parse_verdict("[[C>D]]") is None
    assert parse_yes_no("Yes, it was.") is True and parse_yes_no(" NO") is False and parse_yes_no("maybe") is None


def _judge(cls, backend, **kw):
    j = cls(vlm="scripted", **kw)
    j._backend = backend
    from editlens.metrics.spec import MetricSpec

    j.spec = MetricSpec(cls.__name__.lower(), cls, ("source", "edited", "instruction"), True, (0.0, 1.0), "vlm")
    j.options = {}
    return j


def _sample(i=0):
    return EditSample(f"s{i}", rng_image(i), rng_image(i + 1), "add a hat").load()


def test_viescore_overall_and_unscored():
    answers = iter(['{"score": [8, 6], "reasoning": "hat added"}', '{"score": [9, 4], "reasoning": "blurry"}',
                    "I am not sure.", '{"score": [9, 9]}'])
    be = ScriptedBackend(lambda r: next(answers))
    good, bad = _judge(VIEScoreJudge, be).score_batch([_sample(0), _sample(1)])
    assert good.value == pytest.approx(math.sqrt(6 * 4) / 10)
    assert good.details["SC"] == [8, 6] and good.details["reasoning"]["PQ"] == "blurry"
    assert bad.status == "unscored" and bad.value is None and bad.details["raw"]["SC"] == "I am not sure."
    assert be.calls == 1  # both prompts of both samples in one batch


def test_viescore_prompt_carries_images_in_order():
    be = ScriptedBackend(lambda r: '{"score": [1, 1]}')
    s = _sample(3)
    _judge(VIEScoreJudge, be).score_batch([s])
    sc_parts = be.requests[0].messages[0].parts
    assert sc_parts[0] is s.source and sc_parts[1] is s.edited and "add a hat" in sc_parts[2]
    assert len(be.requests[1].images) == 1 and be.requests[1].images[0] is s.edited


def test_yes_no_from_logprobs_and_text_fallback():
    def answer(r):
        return {0: Generation("YES", [TokenStep("YES", -0.2, {"YES": math.log(0.6), "NO": math.log(0.2)})]),
                1: Generation("No."), 2: Generation("Perhaps")}[answer.i]

    outs = []
    for i in range(3):
        answer.i = i
        outs += _judge(YesNoJudge, ScriptedBackend(answer)).score_batch([_sample(i)])
    assert outs[0].value == pytest.approx(0.75) and outs[0].details["p_yes_from"] == "logprobs"
    assert outs[1].value == 0.0 and outs[1].details["p_yes_from"] == "text"
    assert outs[2].status == "unscored" and outs[2].details["raw"] == "Perhaps"


def test_refusal_is_unscored_not_zero():
    be = ScriptedBackend(lambda r: Generation(None, refusal="cannot"))
    (s,) = _judge(YesNoJudge, be).score_batch([_sample()])
    assert s.status == "unscored" and s.reason == "model refused: cannot"


def test_pairwise_verdicts():
    answers = iter(["B keeps the background.\n[[B>A]]", "both fine [[A=B=Good]]", "no idea"])
    j = _judge(PairwiseJudge, ScriptedBackend(lambda r: next(answers)), orders="forward")
    a = rng_image(0)
    v = j.compare([(a, a, a, "x")] * 3)
    assert [x.verdict for x in v] == ["B>A", "A=B=Good", None] and [x.label for x in v] == [-1, 0, None]
    assert v[2].raw == "no idea"


def test_captioner_fills_missing_captions_only():
    be = ScriptedBackend(lambda r: '"a cat on a sofa."\nextra' if r.images else "a cat in a hat on a sofa")
    s1 = _sample(0)
    s2 = EditSample("k", rng_image(5), rng_image(6), "add a hat", source_caption="given", target_caption="given too").load()
    out = _judge(Captioner, be).score_batch([s1, s2])
    assert (s1.source_caption, s1.target_caption) == ("a cat on a sofa.", "a cat in a hat on a sofa")
    assert (s2.source_caption, s2.target_caption) == ("given", "given too")
    assert out[0].status == "info" and out[0].details["generated"] == ["source_caption", "target_caption"]
    assert len(be.requests) == 2


def test_template_override(tmp_path, monkeypatch):
    custom = tmp_path / "yes_no.txt"
    custom.write_text("<<edited>>\nDid '$instruction' happen? YES/NO")
    t = load_template("yes_no", {"yes_no": str(custom)})
    parts = t.render({"edited": rng_image(0)}, instruction="add a hat")
    assert parts[1] == "Did 'add a hat' happen? YES/NO"
    monkeypatch.setenv("EDITLENS_TEMPLATE_DIR", str(tmp_path))
    assert load_template("yes_no").source == str(custom)
    assert load_template("viescore_sc").source.startswith("editlens/templates")


def test_cli_score_with_local_tiny_vlm(tiny_vlm_dirs):
    from editlens.cli.main import app

    src = EXAMPLES / "images" / "cat_seat_source.png"
    edt = EXAMPLES / "images" / "cat_seat_edited.png"
    res = CliRunner().invoke(app, ["score", "--source", str(src), "--edited", str(edt), "--instruction", "Put a cat",
                                   "--metrics", "l1", "--judge", "viescore,yes_no", "--vlm",
                                   str(tiny_vlm_dirs["idefics3"]), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    scores = json.loads(res.stdout)["scores"]
    # a random model answers noise: recorded honestly, raw text kept
    assert scores["viescore"]["status"] == "unscored" and "raw" in scores["viescore"]["details"]
    # P(YES) only when the noise happens to be a yes/no answer; otherwise unscored with the raw text
    yn = scores["yes_no"]
    assert (yn["status"] == "scored" and 0 <= yn["value"] <= 1) or (yn["status"] == "unscored" and "raw" in yn["details"])
    assert scores["l1"]["status"] == "scored"


def test_cli_run_through_serve_and_cached_rerun(tiny_vlm_dirs, tmp_path):
    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import build_app
    from editlens.cli.main import app

    backend = TransformersBackend(str(tiny_vlm_dirs["idefics3"]))
    from editlens.backends.types import Generation

    served = []  # every answer the model finished, in order (serve generates in slices)
    generate_some = backend.generate_some

    def recorded(reqs, *args, **kw):
        out = generate_some(reqs, *args, **kw)
        # the one-token probe of the engine check at start is not a judge's answer
        served.extend(g for r, g in zip(reqs, out) if isinstance(g, Generation) and r.settings.max_new_tokens > 1)
        return out

    backend.generate_some = recorded
    with running(build_app(backend, "tiny")) as url:
        args = ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(tmp_path / "r"), "--metrics", "l1",
                "--judge", "viescore,yes_no", "--vlm", url, "--captions", "--no-progress", "--max-retries", "0",
                "--allow-failures"]
        res = CliRunner().invoke(app, args, catch_exceptions=False)
        assert res.exit_code == 0, res.output
        assert served
        records = [json.loads(x) for x in open(tmp_path / "r" / "results.jsonl")]
        assert all(r["scores"]["viescore"]["status"] in ("scored", "unscored", "failed") for r in records)
        # noise captions: used when complete, else a failed caption with its reason (never the noise)
        for r in records:
            cap = r["scores"]["captions"]
            assert cap["status"] == "info" or (cap["status"] in ("failed", "unscored") and cap["details"]["failed"])
        # an empty answer is a lost answer (not cached): a rerun in another directory asks exactly
        # those again; every other answer comes from the response cache
        empty = sum(not (g.text or "").strip() for g in served)
        first = len(served)
        res = CliRunner().invoke(app, args[:3] + [str(tmp_path / "r2")] + args[4:], catch_exceptions=False)
        assert res.exit_code == 0 and len(served) - first == empty
