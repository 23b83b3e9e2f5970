"""Judge answers that cannot be understood never become numbers
(items 1, 3, 4, 5, 6, 7) and self-ensembling (item 16)."""

import math

import pytest
from helpers import rng_image
from scripted import ScriptedBackend

from editlens.backends.cache import CachedBackend, ResponseCache
from editlens.backends.types import Generation, TokenStep
from editlens.core.types import EditSample
from editlens.dice.coherence import CoherenceEstimator, _verdict
from editlens.dice.confidence import assign_confidence
from editlens.dice.parsing import parse_differences
from editlens.dice.types import DiceResult, Difference
from editlens.judges.captioner import Captioner
from editlens.judges.pairwise import PairwiseJudge
from editlens.judges.parsing import parse_decision, parse_scores, read_scores
from editlens.judges.viescore import VIEScoreJudge
from editlens.judges.yesno import YesNoJudge
from editlens.metrics.spec import MetricSpec

YN = {"YES": math.log(0.8), "NO": math.log(0.2)}
CMD = lambda a, r, e: {"ADD": math.log(a), "REMOVE": math.log(r), "EDIT": math.log(e)}  # noqa: E731


def _judge(cls, backend, **kw):
    j = cls(vlm="scripted", **kw)
    j._backend = backend
    j.spec = MetricSpec(cls.__name__.lower(), cls, ("source", "edited", "instruction"), True, (0.0, 1.0))
    j.options = {}
    return j


def _sample(i=0):
    return EditSample(f"s{i}", rng_image(i), rng_image(i + 1), "add a hat").load()


# -- item 1: yes/no ------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "I'm sorry, I cannot judge images of people.", "The hat is there.", "Maybe."])
def test_yes_no_probability_only_for_a_yes_no_answer(text):
    g = Generation(text, [TokenStep(text[:3] or "", -0.1, dict(YN))], "stop")
    (s,) = _judge(YesNoJudge, ScriptedBackend(lambda r: g)).score_batch([_sample()])
    assert s.status == "unscored" and s.value is None and s.details["raw"] == text
    if "sorry" in text:
        assert s.reason.startswith("model refused")


def test_yes_no_reads_the_answer_token_not_step_zero():
    # the answer starts with a quote token; P(YES) is read where YES is
    g = Generation('"YES"', [TokenStep('"', -0.1, {"YES": math.log(0.1), "NO": math.log(0.9)}),
                             TokenStep("YES", -0.1, dict(YN)), TokenStep('"', -0.1, {})], "stop")
    (s,) = _judge(YesNoJudge, ScriptedBackend(lambda r: g)).score_batch([_sample()])
    assert s.value == pytest.approx(0.8) and s.details["p_yes_from"] == "logprobs"


# -- item 3: coherence decision lines ---------------------------------------------------
@pytest.mark.parametrize("text", ["The hat is what was asked, so YES it matches", "NO idea what changed here.",
                                  "YES", "Answer YES or NO: the hat"])
def test_bare_yes_no_is_not_a_verdict(text):
    v = _verdict(Generation(text, None, "stop"))
    assert v.coherent is None and v.raw == text and "decision" in v.problem


@pytest.mark.parametrize("text,said", [("Requested.\nANSWER: YES", True), ('Not asked.\nDecision: "NO"', False),
                                       ("Fine. ANSWER: yes.", True), ("**Answer:** 'NO'", False)])
def test_decision_lines(text, said):
    assert _verdict(Generation(text)).coherent is said and parse_decision(text)[0] is said


def test_coherence_p_yes_from_the_decision_token():
    text = "YES the hat.\nANSWER: NO"
    toks = ["YES", " the", " hat", ".\n", "ANSWER", ":", " NO"]
    steps = [TokenStep(t, -0.1, dict(YN) if t.strip() in ("YES", "NO") else {}) for t in toks]
    steps[-1] = TokenStep(" NO", -0.1, {"YES": math.log(0.3), "NO": math.log(0.7)})
    v = _verdict(Generation(text, steps, "stop"))
    assert v.coherent is False and v.p_yes == pytest.approx(0.3)


# -- item 4: VIEScore parsing -------------------------------------------------------------
@pytest.mark.parametrize("text", ["On the scale [0, 10] I give 7 and 8", "Scale is [0, 10]. Overall good.",
                                  '{"reasoning": "ok", "score": "seven"}', "I'm sorry, I can't rate this."])
def test_scale_mentions_are_not_scores(text):
    assert parse_scores(text) is None
    assert read_scores(text)[2]


@pytest.mark.parametrize("text,scores", [('On the scale [0, 10]: {"score": [7, 8]}', [7.0, 8.0]),
                                         ("On the scale [0, 10] my score: [7, 8]", [7.0, 8.0]),
                                         ("[7, 8]", [7.0, 8.0]), ('"[3, 4]"', [3.0, 4.0])])
def test_structured_answer_preferred(text, scores):
    assert parse_scores(text)[0] == scores


# -- item 5: DICE confidence reads the command token --------------------------------------
def test_confidence_aligned_by_offsets_when_decodes_differ():
    text = "ADD: a, [0.1, 0.1, 0.2, 0.2]\nEDIT: b, [0.3, 0.3, 0.5, 0.5]"
    # per-token decodes carry extra leading spaces (SentencePiece-style): their lengths do not add up
    toks = [" ADD", " :", " a,", " [0.1, 0.1, 0.2, 0.2]", "\n", " EDIT", " :", " b,", " [0.3, 0.3, 0.5, 0.5]"]
    steps = [TokenStep(t, -0.1, CMD(0.2, 0.2, 0.6)) for t in toks]  # a backend gives candidates at every step
    steps[0] = TokenStep(" ADD", -0.1, CMD(0.5, 0.25, 0.25))
    steps[5] = TokenStep(" EDIT", -0.1, CMD(0.1, 0.1, 0.8))
    diffs = parse_differences(text)
    assign_confidence(Generation(text, steps), diffs)
    assert diffs[0].confidence == pytest.approx(0.5) and diffs[1].confidence == pytest.approx(0.8)


def test_wrong_token_at_the_command_step_gives_no_confidence():
    text = "ADD: cat, [0.1, 0.1, 0.2, 0.2]"
    gen = Generation(text, [TokenStep("EDIT", -0.1, CMD(0.7, 0.2, 0.1)), TokenStep(": cat, [0.1, 0.1, 0.2, 0.2]", -0.1)])
    diffs = parse_differences(text)
    assign_confidence(gen, diffs)
    assert diffs[0].confidence is None and diffs[0].confidence_source.startswith("unavailable")


def test_multi_piece_command_read_at_its_first_piece():
    text = "REMOVE: dog, [0.5, 0.5, 0.6, 0.6]"
    gen = Generation(text, [TokenStep("RE", -0.1, CMD(0.1, 0.6, 0.3)), TokenStep("MOVE", -0.1, CMD(0.3, 0.3, 0.4)),
                            TokenStep(": dog, [0.5, 0.5, 0.6, 0.6]", -0.1)])
    diffs = parse_differences(text)
    assign_confidence(gen, diffs)
    assert diffs[0].confidence == pytest.approx(0.6) and "first of 2" in diffs[0].confidence_source
    # a token that runs on into another word is not the command
    gen2 = Generation("ADDED: x, [0, 0, 1, 1]", [TokenStep("ADDED", -0.1, CMD(0.5, 0.3, 0.2)),
                                                 TokenStep(": x, [0, 0, 1, 1]", -0.1)])
    d2 = [Difference("ADD", "x", (0, 0, 1, 1), char_offset=0)]
    assign_confidence(gen2, d2)
    assert d2[0].confidence is None


# -- item 6: truncated answers ------------------------------------------------------------
def test_truncated_viescore_is_unscored_with_reason():
    g = Generation('{"reasoning": "the hat is there and the', None, "length")
    (s,) = _judge(VIEScoreJudge, ScriptedBackend(lambda r: g)).score_batch([_sample()])
    assert s.status == "unscored" and "cut off" in s.reason


def test_truncated_coherence_answer():
    v = _verdict(Generation("The hat was asked for and the colour", None, "length"))
    assert v.coherent is None and "cut off" in v.problem


# -- item 7: the captioner -------------------------------------------------------------------
@pytest.mark.parametrize("gen,why,status", [
    (Generation("I'm sorry, but I can't describe this image."), "refused", "unscored"),
    (Generation(None, error="HTTP 500"), "backend error", "failed"),
    # cut off at the token limit: the model's answer, unscored like a cut-off judge answer (not retried forever)
    (Generation("a cat sitting on a", None, "length"), "cut off", "unscored")])
def test_failed_caption_is_never_a_caption(gen, why, status):
    s = _sample()
    (row,) = _judge(Captioner, ScriptedBackend(lambda r: gen)).score_batch([s])
    assert s.source_caption is None and s.target_caption is None
    assert row.status == status and why in row.reason and row.details["failed"]["source_caption"]["reason"]


# -- item 16: self-ensembling -----------------------------------------------------------------
def _by_seed(answers):
    return ScriptedBackend(lambda r: answers[r.settings.seed % len(answers)] if r.settings.seed is not None else answers[0])


def test_viescore_samples_mean_spread_unscored_and_cache(tmp_path):
    answers = ['{"score": [8, 8]}', '{"score": [6, 6]}', "no idea", '{"score": [4, 4]}', '{"score": [10, 10]}']
    inner = _by_seed(answers)
    backend = CachedBackend(inner, ResponseCache(tmp_path / "c.sqlite"))
    # by default every requested sample must parse: one "no idea" leaves the sample unscored, answers kept
    (strict,) = _judge(VIEScoreJudge, backend, samples=3, temperature=0.7).score_batch([_sample()])
    assert strict.status == "unscored" and "only 2 of 3 sampled answers" in strict.reason
    assert strict.details["parsed_samples"] == 2 and len(strict.details["raw"]) == 3
    assert len(inner.requests) == 6  # 3 samples x (SC, PQ), each its own request
    (s,) = _judge(VIEScoreJudge, backend, samples=3, temperature=0.7, min_samples=2).score_batch([_sample()])
    assert len(inner.requests) == 6  # the same answers, from the cache
    assert s.value == pytest.approx(0.7) and s.details["std"] == pytest.approx(0.1)
    assert s.details["samples"] == 3 and s.details["unscored_samples"] == 1
    (s5,) = _judge(VIEScoreJudge, backend, samples=5, temperature=0.7, min_samples=4).score_batch([_sample()])
    assert len(inner.requests) == 10  # raising N asked only for samples 4 and 5
    assert s5.value == pytest.approx((0.8 + 0.6 + 0.4 + 1.0) / 4) and s5.details["unscored_samples"] == 1


def test_yes_no_and_pairwise_agreement():
    yn = _by_seed([Generation("YES"), Generation("NO"), Generation("YES"), Generation("Perhaps")])
    (s,) = _judge(YesNoJudge, yn, samples=4, temperature=1.0, min_samples=3).score_batch([_sample()])
    assert s.value == pytest.approx(2 / 3) and s.details["agreement"] == pytest.approx(2 / 3)
    assert s.details["majority"] == "YES" and s.details["unscored_samples"] == 1
    pw = _by_seed(["[[A>B]]", "[[A>B]]", "[[B>A]]"])
    a = rng_image(0)
    (v,) = _judge(PairwiseJudge, pw, samples=3, temperature=0.8, orders="forward").compare([(a, a, a, "x")])
    assert v.verdict == "A>B" and v.ensemble["agreement"] == pytest.approx(2 / 3)
    tie = _by_seed(["[[A>B]]", "[[B>A]]"])
    (t,) = _judge(PairwiseJudge, tie, samples=2, temperature=0.8, orders="forward").compare([(a, a, a, "x")])
    assert t.verdict is None and "tied" in t.reason


def test_coherence_samples_majority():
    be = _by_seed(["ok\nANSWER: YES", "no\nANSWER: NO", "ok\nANSWER: YES", "hmm"])
    res = DiceResult([Difference("ADD", "hat", (0.1, 0.1, 0.5, 0.5))])
    CoherenceEstimator(be, samples=4, temperature=0.9, min_samples=3).judge([_sample()], [res])
    v = res.verdicts[0]
    assert v.coherent is True and v.ensemble["agreement"] == pytest.approx(2 / 3)
    assert v.ensemble["unscored_samples"] == 1 and len(v.raws) == 4


def test_samples_need_temperature():
    with pytest.raises(ValueError, match="temperature"):
        _judge(YesNoJudge, ScriptedBackend(lambda r: "YES"), samples=3)


def test_confidence_of_a_json_list_answer():
    text = '["ADD: a, [0.1, 0.1, 0.2, 0.2]", "EDIT: b, [0.3, 0.3, 0.5, 0.5]"]'
    toks = ['["', "ADD", ': a, [0.1, 0.1, 0.2, 0.2]", "', "EDIT", ': b, [0.3, 0.3, 0.5, 0.5]"]']
    assert "".join(toks) == text
    steps = [TokenStep(t, -0.1, CMD(0.2, 0.2, 0.6)) for t in toks]
    steps[1] = TokenStep("ADD", -0.1, CMD(0.9, 0.05, 0.05))
    steps[3] = TokenStep("EDIT", -0.1, CMD(0.1, 0.2, 0.7))
    diffs = parse_differences(text)
    assign_confidence(Generation(text, steps), diffs)
    assert [d.confidence for d in diffs] == [pytest.approx(0.9), pytest.approx(0.7)]


def test_wire_candidates_count_every_capitalisation():
    from editlens.backends.wire import _candidates_from_top

    top = [{"token": "Yes", "logprob": math.log(0.3)}, {"token": " YES", "logprob": math.log(0.2)},
           {"token": "No", "logprob": math.log(0.1)}]
    got = _candidates_from_top(top, ("YES", "NO"))
    assert got["YES"] == pytest.approx(math.log(0.5)) and got["NO"] == pytest.approx(math.log(0.1))
