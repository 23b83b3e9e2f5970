"""Captions for CLIP-T and CLIP-D written by a vision-language model: the
source caption from the source image, the target caption from that caption
plus the instruction (the route DICE and ADIEE take).

As an evaluator it runs before the metrics of each batch, fills the
captions a sample lacks, and records the captions it used as an ``info``
row; its answers are cached like every other, so reruns cost nothing.

A backend error, a refusal ("I'm sorry, I can't..."), an empty answer or
one cut off before its first line ended is no caption: the sample keeps
none (metrics that need it are skipped with the reason), never a caption
made of that text. As with a judge's answer, the row is ``failed`` when the
request was lost (a rerun asks again) and ``unscored`` when the model
answered that way (the raw text kept; a rerun would get the same answer).
"""

from __future__ import annotations

from typing import Any, Sequence

from editlens.backends.types import ChatRequest, Generation, GenerationSettings, Message, is_backend_failure
from editlens.core.types import LoadedEdit, Score
from editlens.judges.base import VLMJudge
from editlens.judges.parsing import refusal_in


def _clean(text: str | None) -> str | None:
    if not text:
        return None
    line = next((x.strip() for x in text.strip().splitlines() if x.strip()), "")
    line = line.strip().strip('"').strip("'").strip()
    return line or None


def caption_from(g: Generation) -> tuple[str | None, str | None]:
    """``(caption, None)`` or ``(None, why there is none)``."""
    if g.problem:
        return None, g.problem
    refused = refusal_in(g.text)
    if refused:
        return None, f"model refused: {refused}"
    if g.truncated and "\n" not in (g.text or "").strip():
        return None, "caption cut off at the token limit"
    cap = _clean(g.text)
    return (cap, None) if cap else (None, "empty answer")


class Captioner(VLMJudge):
    template_names = ("caption_source", "caption_target")
    images_per_prompt = 1
    always_run = True  # the run loop runs it even when its rows exist, so metrics always see captions

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        settings = GenerationSettings(max_new_tokens=min(self.max_new_tokens, 64))
        need_src = [s for s in batch if s.source_caption is None]
        gens = self.backend.generate([ChatRequest([Message("user", self.templates["caption_source"].render(
            {"source": s.source}))], settings) for s in need_src])
        generated: dict[str, dict[str, str | None]] = {s.id: {} for s in batch}
        failed: dict[str, dict[str, dict[str, str | None]]] = {s.id: {} for s in batch}
        for s, g in zip(need_src, gens):
            cap, why = caption_from(g)
            s.source_caption = cap
            if cap is None:
                failed[s.id]["source_caption"] = {"reason": why, "raw": g.text}
            else:
                generated[s.id]["source_caption"] = cap
        need_tgt = [(s, s.source_caption) for s in batch if s.target_caption is None and s.source_caption]
        gens = self.backend.generate([ChatRequest([Message("user", self.templates["caption_target"].render(
            {}, source_caption=caption, instruction=s.instruction))], settings) for s, caption in need_tgt])
        for (s, _), g in zip(need_tgt, gens):
            cap, why = caption_from(g)
            s.target_caption = cap
            if cap is None:
                failed[s.id]["target_caption"] = {"reason": why, "raw": g.text}
            else:
                generated[s.id]["target_caption"] = cap
        out: list[float | Score] = []
        for s in batch:
            details: dict[str, Any] = {"source_caption": s.source_caption, "target_caption": s.target_caption,
                       "generated": sorted(generated[s.id])}
            if failed[s.id]:
                details["failed"] = failed[s.id]
                reason = "; ".join(f"{k.replace('_', ' ')}: {v['reason']}" for k, v in failed[s.id].items())
                # as for a judge's answer: a lost request is failed (redone on rerun); the model's own answer
                # (cut off, refused, empty) is unscored with the raw text kept, not re-asked forever
                lost = any(is_backend_failure(v["reason"]) for v in failed[s.id].values())
                out.append(Score(self.name, None, "failed" if lost else "unscored", f"caption failed ({reason})",
                                 details))
            else:
                out.append(Score(self.name, None, "info", None, details))
        return out
