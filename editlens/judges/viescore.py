"""VIEScore-style judge: semantic consistency (edit success, restraint) and
perceptual quality (naturalness, cleanliness), each two 0-10 scores;
overall = sqrt(min(SC) * min(PQ)) / 10, in [0, 1].

Scores are read strictly (:func:`~editlens.judges.parsing.read_scores`):
the JSON ``score`` field, a ``score: [...]`` list, or an answer that is only
the list; anything else is *unscored* with the raw text. With ``samples`` >
1 the overall score is the mean over the sampled answer pairs that parsed.
"""

from __future__ import annotations

import math
from typing import Sequence

from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message, is_backend_failure
from editlens.core.types import LoadedEdit, Score
from editlens.judges.base import VLMJudge
from editlens.judges.ensemble import Outcome, combine
from editlens.judges.parsing import read_scores


def _read(g: Generation) -> tuple[list[float] | None, str | None, str | None]:
    if g.problem:
        return None, None, g.problem
    scores, reasoning, problem = read_scores(g.text)
    if scores is None and g.truncated:
        problem = f"answer cut off at the token limit ({problem})"
    return scores, reasoning, problem


def viescore_outcome(sc_g: Generation, pq_g: Generation) -> Outcome:
    """One answer pair (SC, PQ) as an ensemble outcome."""
    raw = {"SC": sc_g.text, "PQ": pq_g.text}
    (sc, sc_why, sc_p), (pq, pq_why, pq_p) = _read(sc_g), _read(pq_g)
    for g in (sc_g, pq_g):  # the backend failed: the whole outcome failed (retried on rerun), not unscored
        if is_backend_failure(g.problem):
            return Outcome(None, problem=g.problem, raw=raw)
    if sc is None or pq is None:
        problem = "; ".join(f"{k}: {p}" for k, p, v in (("SC", sc_p, sc), ("PQ", pq_p, pq)) if v is None)
        return Outcome(None, problem=problem, raw=raw)
    value = math.sqrt(min(sc) * min(pq)) / 10.0
    details = {"SC": sc, "PQ": pq, "reasoning": {"SC": sc_why, "PQ": pq_why},
               "cached": sc_g.cached and pq_g.cached}
    if sc_g.truncated or pq_g.truncated:
        details["truncated"] = [k for k, g in (("SC", sc_g), ("PQ", pq_g)) if g.truncated]
    return Outcome(value, details, raw=raw)


class VIEScoreJudge(VLMJudge):
    template_names = ("viescore_sc", "viescore_pq")

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        sc_t, pq_t = self.templates["viescore_sc"], self.templates["viescore_pq"]
        reqs = []
        for s in batch:
            imgs = {"source": s.source, "edited": s.edited}
            reqs.append(ChatRequest([Message("user", sc_t.render(imgs, instruction=s.instruction))], settings))
            reqs.append(ChatRequest([Message("user", pq_t.render(imgs, instruction=s.instruction))], settings))
        answers = self.ask(reqs)
        out: list[float | Score] = []
        for i, _ in enumerate(batch):
            sc_gens, pq_gens = answers[2 * i], answers[2 * i + 1]
            out.append(combine(self.name, [viescore_outcome(a, b) for a, b in zip(sc_gens, pq_gens)],
                               self.min_samples))
        return out
