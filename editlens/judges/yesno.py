"""Yes/no judge: score = P(YES) that the instruction was carried out, from
the token log-probabilities of YES and NO at the answer's YES/NO token.

P(YES) counts only when the answer itself is a yes/no answer (it starts
with YES or NO) and the token at the step read is that word; an empty
answer, a refusal or any other text is *unscored* with the reason and the
raw text. A backend without log-probabilities gives the stated answer (1 or
0), and ``details["p_yes_from"]`` says so. With ``samples`` > 1 the score is
the mean over the sampled yes/no answers, with their agreement.
"""

from __future__ import annotations

from typing import Sequence

from editlens.backends.alignment import word_step
from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message
from editlens.core.types import LoadedEdit, Score
from editlens.judges.base import VLMJudge
from editlens.judges.ensemble import Outcome, combine
from editlens.judges.parsing import refusal_in, yes_no_span


def yes_no_outcome(g: Generation) -> Outcome:
    if g.problem:
        return Outcome(None, problem=g.problem, raw=g.text)
    span = yes_no_span(g.text)
    if span is None:
        refused = refusal_in(g.text)
        problem = f"model refused: {refused}" if refused else "the answer is neither YES nor NO"
        return Outcome(None, problem=problem, raw=g.text)
    said, offset = span
    word = "YES" if said else "NO"
    details: dict = {"answer": g.text, "said": word}
    if g.truncated:
        details["truncated"] = True  # the decision came first; what was cut is the explanation
    j, _, why = word_step(g, offset, (g.text or "")[offset : offset + len(word)])
    dist = None if j is None else g.candidate_distribution(j)
    if g.logprob_source:  # on an engine: exact ids, or its top log-probabilities only
        details["probability_source"] = g.logprob_source
    if dist is not None and "YES" in dist:
        return Outcome(dist["YES"], {**details, "p_yes_from": "logprobs"}, raw=g.text, vote=word)
    # no usable log-probabilities: the stated answer is the only evidence, and details say so
    note = why if j is None else "no YES/NO log-probabilities at the answer token"
    if j is not None and g.steps and j < len(g.steps):
        missing = [c for c, v in g.steps[j].candidates.items() if v is None]
        if missing and g.logprob_source:
            note = f"{', '.join(missing)} not among the log-probabilities the engine returned at the answer token"
    return Outcome(1.0 if said else 0.0, {**details, "p_yes_from": "text", "logprobs_unavailable": note},
                   raw=g.text, vote=word)


class YesNoJudge(VLMJudge):
    template_names = ("yes_no",)

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        t = self.templates["yes_no"]
        settings = GenerationSettings(max_new_tokens=min(self.max_new_tokens, 8))
        reqs = [ChatRequest([Message("user", t.render({"source": s.source, "edited": s.edited},
                                                      instruction=s.instruction))], settings, ("YES", "NO"))
                for s in batch]
        return [combine(self.name, [yes_no_outcome(g) for g in gens], self.min_samples) for gens in self.ask(reqs)]
