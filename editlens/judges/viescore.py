"""VIEScore-style judge: semantic consistency (edit success, restraint) and
perceptual quality (naturalness, cleanliness), each two 0-10 scores;
overall = sqrt(min(SC) * min(PQ)) / 10, in [0, 1]."""

from __future__ import annotations

import math
from typing import Sequence

from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.core.types import LoadedEdit, Score
from editlens.judges.base import VLMJudge
from editlens.judges.parsing import parse_scores


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
        gens = self.backend.generate(reqs)
        out: list[float | Score] = []
        for i, _ in enumerate(batch):
            sc_g, pq_g = gens[2 * i], gens[2 * i + 1]
            raw = {"SC": sc_g.text, "PQ": pq_g.text}
            problem = sc_g.problem or pq_g.problem
            if problem:
                out.append(self.unscored(self.name, problem, raw))
                continue
            sc, pq = parse_scores(sc_g.text), parse_scores(pq_g.text)
            if sc is None or pq is None:
                which = " and ".join(k for k, v in (("SC", sc), ("PQ", pq)) if v is None)
                out.append(self.unscored(self.name, f"{which} answer has no two 0-10 scores", raw))
                continue
            value = math.sqrt(min(sc[0]) * min(pq[0])) / 10.0
            out.append(Score(self.name, value, details={
                "SC": sc[0], "PQ": pq[0], "reasoning": {"SC": sc[1], "PQ": pq[1]}, "cached": sc_g.cached and pq_g.cached}))
        return out
