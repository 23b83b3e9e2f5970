"""Coherence estimator: for each difference, its box drawn on the images,
the instruction, command and description go to the VLM, which answers with
reasoning and a decision line; P(YES) comes from the log-probabilities of
YES and NO at the decision's token when the backend gives them.

Only an explicit decision line counts (``ANSWER: YES``, ``Decision: "no"``;
see :func:`~editlens.judges.parsing.parse_decision`): a bare YES or NO in
the reasoning is not a verdict, and such an answer is recorded unjudged
with its raw text. With ``samples`` > 1 the verdict is the majority of the
sampled decisions (a tie is no verdict), ``p_yes`` their mean, and the
agreement is kept; it needs ``min_samples`` decisions (default: all), and a
sampled request lost to the transport leaves the difference unjudged with
that backend error as its problem (the DICE row is then *failed*).
"""

from __future__ import annotations

from typing import Any, Sequence

from editlens.backends.alignment import word_step
from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message, is_backend_failure
from editlens.core.types import LoadedEdit
from editlens.dice.drawing import draw_differences
from editlens.dice.types import DiceResult, Verdict
from editlens.judges.ensemble import check_sampling, expand, majority, regroup
from editlens.judges.parsing import parse_decision, refusal_in
from editlens.judges.templates import Template, load_template


def _verdict(g: Generation) -> Verdict:
    if g.problem:
        return Verdict(None, raw=g.text, problem=g.problem)
    text = g.text or ""
    found = parse_decision(text)
    if found is None:
        refused = refusal_in(text)
        if refused:
            problem = f"model refused: {refused}"
        elif g.truncated:
            problem = "answer cut off at the token limit before its ANSWER: YES/NO line"
        else:
            problem = "no decision line (ANSWER: YES or ANSWER: NO) in the answer"
        return Verdict(None, raw=text, problem=problem)
    said, offset = found
    label = max(text.upper().rfind("ANSWER", 0, offset), text.upper().rfind("DECISION", 0, offset))
    reasoning = text[: max(label, 0)].strip().rstrip("*_#>-").strip() or None
    p_yes = None
    word = text[offset : offset + (3 if said else 2)]
    j, _, _ = word_step(g, offset, word)
    if j is not None:
        dist = g.candidate_distribution(j)
        p_yes = None if dist is None else dist.get("YES")
    return Verdict(said, p_yes, reasoning, text)


def combine_verdicts(verdicts: Sequence[Verdict], min_samples: int | None = None) -> Verdict:
    """One verdict from sampled ones: majority decision, mean P(YES), agreement."""
    if len(verdicts) == 1:
        return verdicts[0]
    top, agreement, unusable = majority([v.coherent for v in verdicts])
    ps = [v.p_yes for v in verdicts if v.coherent is not None and v.p_yes is not None]
    info = {"samples": len(verdicts), "votes": [v.coherent for v in verdicts], "agreement": agreement,
            "unscored_samples": unusable}
    problem = None
    lost = [v.problem for v in verdicts if is_backend_failure(v.problem)]
    need = len(verdicts) if min_samples is None else min_samples
    if lost:
        top, problem = None, f"{lost[0]} ({len(lost)} of {len(verdicts)} sampled requests lost)"
    elif 0 < len(verdicts) - unusable < need:
        top, problem = None, (f"only {len(verdicts) - unusable} of {len(verdicts)} sampled answers had a decision, "
                              f"{need} needed (--min-samples)")
    elif top is None:
        problem = ("sampled decisions are tied" if unusable < len(verdicts)
                   else f"no sampled answer had a decision ({verdicts[0].problem})")
    reasoning = next((v.reasoning for v in verdicts if v.coherent == top and v.reasoning), None)
    return Verdict(top if isinstance(top, bool) else None, sum(ps) / len(ps) if ps else None, reasoning,
                   verdicts[0].raw, problem, ensemble=info, raws=[v.raw for v in verdicts])


class CoherenceEstimator:
    def __init__(self, backend: Any, template: Template | None = None, max_new_tokens: int = 128,
                 samples: int = 1, temperature: float = 0.0, seed: int = 0, min_samples: int | None = None) -> None:
        check_sampling(samples, temperature, min_samples)
        self.min_samples = min_samples
        self.backend = backend
        self.template = template or load_template("dice_coherence")
        self.max_new_tokens = max_new_tokens
        self.samples, self.temperature, self.seed = samples, temperature, seed

    def judge(self, batch: Sequence[LoadedEdit], results: Sequence[DiceResult]) -> None:
        """Fill ``result.verdicts`` for every result (one request per difference, all batched)."""
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        reqs, where = [], []
        for si, (s, res) in enumerate(zip(batch, results)):
            for di, d in enumerate(res.differences):
                src, edt = draw_differences(s.source, s.edited, [d])
                parts = self.template.render({"source": src, "edited": edt}, instruction=s.instruction,
                                             command=d.command, object=d.object or "a changed region")
                reqs.append(ChatRequest([Message("user", parts)], settings, ("YES", "NO")))
                where.append((si, di))
        n = self.samples if self.temperature > 0 else 1
        gens = self.backend.generate(expand(reqs, n, self.temperature, self.seed)) if reqs else []
        for res in results:
            res.verdicts = [Verdict(None) for _ in res.differences]
        for (si, di), group in zip(where, regroup(gens, n)):
            results[si].verdicts[di] = combine_verdicts([_verdict(g) for g in group], self.min_samples)  # type: ignore[index]
