"""Coherence estimator: for each difference, its box drawn on the images,
the instruction, command and description go to the VLM, which answers with
reasoning and YES/NO; P(YES) comes from the log-probabilities of YES and NO
at the answer token when the backend gives them."""

from __future__ import annotations

import re
from typing import Any, Sequence

from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message
from editlens.core.types import LoadedEdit
from editlens.dice.drawing import draw_differences
from editlens.dice.types import DiceResult, Verdict
from editlens.judges.templates import Template, load_template

_ANSWER = re.compile(r"ANSWER\s*:\s*(YES|NO)\b", re.I)
_BARE = re.compile(r"\b(YES|NO)\b")


def _verdict(g: Generation) -> Verdict:
    if g.problem:
        return Verdict(None, raw=g.text, problem=g.problem)
    text = g.text or ""
    m = list(_ANSWER.finditer(text)) or list(_BARE.finditer(text))
    if not m:
        return Verdict(None, raw=text, problem="no ANSWER: YES/NO in the answer")
    last = m[-1]
    said = last.group(1).upper() == "YES"
    reasoning = text[: last.start()].strip() or None
    p_yes = None
    if g.steps is not None:
        # the YES/NO token of the final answer: the last step whose token is YES or NO
        for j in range(len(g.steps) - 1, -1, -1):
            if g.steps[j].token.strip().upper() in ("YES", "NO"):
                dist = g.candidate_distribution(j)
                p_yes = None if dist is None else dist.get("YES")
                break
    return Verdict(said, p_yes, reasoning, text)


class CoherenceEstimator:
    def __init__(self, backend: Any, template: Template | None = None, max_new_tokens: int = 128) -> None:
        self.backend = backend
        self.template = template or load_template("dice_coherence")
        self.max_new_tokens = max_new_tokens

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
        gens = self.backend.generate(reqs) if reqs else []
        for res in results:
            res.verdicts = [Verdict(None) for _ in res.differences]
        for (si, di), g in zip(where, gens):
            results[si].verdicts[di] = _verdict(g)  # type: ignore[index]
