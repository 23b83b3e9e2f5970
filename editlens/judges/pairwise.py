"""Pairwise judge: which of two edits of the same source is better.

With ``samples`` > 1 the verdict is the majority over the sampled answers
that gave one (a tie between verdicts is no verdict), with the agreement and
the count of answers without a verdict. It needs ``min_samples`` answers
with a verdict (default: all); a sampled request lost to the transport means
no verdict, with a reason that says so (:attr:`PairVerdict.failed`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from editlens.backends.types import ChatRequest, GenerationSettings, Message, is_backend_failure
from editlens.core.images import ImageLike, load_image
from editlens.judges.base import VLMJudge
from editlens.judges.ensemble import majority
from editlens.judges.parsing import parse_verdict, refusal_in


@dataclass
class PairVerdict:
    verdict: str | None  # A>B, B>A, A=B=Good, A=B=Bad; None = unparsable (raw kept)
    raw: str | list[str | None] | None
    reason: str | None = None
    ensemble: dict[str, Any] = field(default_factory=dict)  # samples, agreement, votes (when samples > 1)

    @property
    def failed(self) -> bool:
        """No verdict because the backend failed (not the model's answer): worth retrying."""
        return self.verdict is None and is_backend_failure(self.reason)

    @property
    def label(self) -> int | None:
        """+1 (A better), -1 (B better), 0 (tie), None (no verdict)."""
        return {"A>B": 1, "B>A": -1, "A=B=Good": 0, "A=B=Bad": 0}.get(self.verdict or "")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"verdict": self.verdict, "raw": self.raw, "reason": self.reason}
        if self.ensemble:
            d["ensemble"] = self.ensemble
        return d


def _one(g: Any) -> tuple[str | None, str | None]:
    if g.problem:
        return None, g.problem
    v = parse_verdict(g.text)
    if v:
        return v, None
    refused = refusal_in(g.text)
    if refused:
        return None, f"model refused: {refused}"
    if g.truncated:
        return None, "answer cut off at the token limit before its [[...]] verdict"
    return None, "no [[...]] verdict in the answer"


class PairwiseJudge(VLMJudge):
    template_names = ("pairwise",)

    def compare(self, items: Sequence[tuple[ImageLike, ImageLike, ImageLike, str]]) -> list[PairVerdict]:
        """``items``: (source, edit A, edit B, instruction) tuples."""
        t = self.templates["pairwise"]
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        reqs = []
        for src, a, b, instruction in items:
            imgs = {k: load_image(v)[0] for k, v in (("source", src), ("edited_a", a), ("edited_b", b))}
            reqs.append(ChatRequest([Message("user", t.render(imgs, instruction=instruction))], settings))
        out = []
        for gens in self.ask(reqs):
            results = [_one(g) for g in gens]
            raws = [g.text for g in gens]
            lost = [why for _, why in results if is_backend_failure(why)]
            if len(gens) == 1:
                out.append(PairVerdict(results[0][0], gens[0].text, results[0][1]))
                continue
            votes = [v for v, _ in results]
            top, agreement, unusable = majority(votes)
            info = {"samples": len(gens), "votes": votes, "agreement": agreement, "unscored_samples": unusable}
            need = len(gens) if self.min_samples is None else self.min_samples
            reason = None
            if lost:
                top, reason = None, (f"{lost[0]} ({len(lost)} of {len(gens)} sampled requests lost; "
                                     "a rerun asks only those)")
            elif len(votes) - unusable < need:
                why = next(w for v, w in results if v is None)
                top, reason = None, (f"no sampled answer had a verdict ({why})" if unusable == len(votes) else
                                     f"only {len(votes) - unusable} of {len(votes)} sampled answers had a verdict, "
                                     f"{need} needed (--min-samples); first problem: {why}")
            elif top is None:
                reason = "sampled verdicts are tied"
            out.append(PairVerdict(top, raws, reason, info))  # type: ignore[arg-type]
        return out
