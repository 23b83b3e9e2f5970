"""Pairwise judge: which of two edits of the same source is better."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.core.images import ImageLike, load_image
from editlens.judges.base import VLMJudge
from editlens.judges.parsing import parse_verdict


@dataclass
class PairVerdict:
    verdict: str | None  # A>B, B>A, A=B=Good, A=B=Bad; None = unparsable (raw kept)
    raw: str | None
    reason: str | None = None

    @property
    def label(self) -> int | None:
        """+1 (A better), -1 (B better), 0 (tie), None (no verdict)."""
        return {"A>B": 1, "B>A": -1, "A=B=Good": 0, "A=B=Bad": 0}.get(self.verdict or "")

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "raw": self.raw, "reason": self.reason}


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
        for g in self.backend.generate(reqs):
            if g.problem:
                out.append(PairVerdict(None, g.text, g.problem))
                continue
            v = parse_verdict(g.text)
            out.append(PairVerdict(v, g.text, None if v else "no [[...]] verdict in the answer"))
        return out
