"""Yes/no judge: score = P(YES) that the instruction was carried out, from
the token log-probabilities of YES and NO at the answer's first token."""

from __future__ import annotations

from typing import Sequence

from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.core.types import LoadedEdit, Score
from editlens.judges.base import VLMJudge
from editlens.judges.parsing import parse_yes_no


class YesNoJudge(VLMJudge):
    template_names = ("yes_no",)

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        t = self.templates["yes_no"]
        settings = GenerationSettings(max_new_tokens=min(self.max_new_tokens, 8))
        reqs = [ChatRequest([Message("user", t.render({"source": s.source, "edited": s.edited},
                                                      instruction=s.instruction))], settings, ("YES", "NO"))
                for s in batch]
        out: list[float | Score] = []
        for g in self.backend.generate(reqs):
            if g.error or g.refusal:
                out.append(self.unscored(self.name, g.problem or "no answer", g.text))
                continue
            dist = g.candidate_distribution(0)
            if dist is not None:
                out.append(Score(self.name, dist["YES"], details={"answer": g.text, "p_yes_from": "logprobs"}))
                continue
            said = parse_yes_no(g.text)
            if said is None:
                out.append(self.unscored(self.name, "no log-probabilities and the answer is not YES or NO", g.text))
            else:
                # The backend gave no log-probabilities: the stated answer is the
                # only evidence, and details say so.
                out.append(Score(self.name, 1.0 if said else 0.0, details={"answer": g.text, "p_yes_from": "text"}))
        return out
