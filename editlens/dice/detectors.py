"""The two difference detectors. Both return :class:`DiceResult` objects
with the same :class:`Difference` type, so everything downstream works with
either."""

from __future__ import annotations

from typing import Any, Sequence

from editlens.backends.families import BOX_CONVENTIONS, DEFAULT_BOX_CONVENTION
from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.core.types import LoadedEdit
from editlens.dice.confidence import assign_confidence
from editlens.dice.parsing import parse_differences_detailed
from editlens.dice.types import CHANGE, COMMANDS, DiceResult, Difference
from editlens.judges.parsing import refusal_in
from editlens.judges.templates import Template, load_template
from editlens.metrics.changemap import ChangeMapParams, sample_change_map


class MLLMDetector:
    """Asks a multi-image VLM for the differences, without the instruction
    (the detector must see what changed, not what was asked).

    ``convention``: how the model writes box coordinates (a key of
    :data:`~editlens.backends.families.BOX_CONVENTIONS`); the prompt asks for
    that convention and the answer is read in it. An answer cut off at the
    token limit is marked ``truncated``: its list may be incomplete.
    """

    name = "mllm"

    def __init__(self, backend: Any, template: Template | None = None, max_new_tokens: int = 256,
                 convention: str = DEFAULT_BOX_CONVENTION) -> None:
        if convention not in BOX_CONVENTIONS:
            raise ValueError(f"unknown box convention {convention!r}; known: {sorted(BOX_CONVENTIONS)}")
        self.backend = backend
        self.template = template or load_template("dice_detect")
        self.max_new_tokens = max_new_tokens
        self.convention = convention

    def detect(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        units = BOX_CONVENTIONS[self.convention]
        reqs = [ChatRequest([Message("user", self.template.render({"source": s.source, "edited": s.edited},
                                                                  box_units=units))], settings, COMMANDS)
                for s in batch]
        out = []
        for s, g in zip(batch, self.backend.generate(reqs)):
            if g.problem:
                out.append(DiceResult([], detector=self.name, raw=g.text, unparsable=True, problem=g.problem))
                continue
            h, w = s.source.shape[:2]
            parsed = parse_differences_detailed(g.text, (w, h), convention=self.convention)
            diffs = parsed.differences
            if diffs is None:
                refused = refusal_in(g.text)
                if refused:
                    problem = f"model refused: {refused}"
                elif parsed.rejected:
                    problem = (f"no usable difference line: {parsed.rejected[0]} (boxes are read as "
                               f"{self.convention}; set the model's convention with --boxes: per-mille for "
                               "Qwen2-VL/Qwen3-VL, pixels for Qwen2.5-VL, fraction otherwise. Behind a URL the "
                               "family is read from the served name or its root)")
                elif g.truncated:
                    problem = "answer cut off at the token limit before any complete difference line"
                else:
                    problem = "no 'COMMAND: object, [x0, y0, x1, y1]' line in the answer"
                out.append(DiceResult([], detector=self.name, raw=g.text, unparsable=True, problem=problem,
                                      truncated=g.truncated, rejected=parsed.rejected))
                continue
            assign_confidence(g, diffs)
            res = DiceResult(diffs, detector=self.name, raw=g.text, truncated=g.truncated, rejected=parsed.rejected)
            if g.truncated:
                res.problem = "answer cut off at the token limit: the difference list may be incomplete"
            out.append(res)
        return out


class ChangeMapDetector:
    """The model-free change map as a detector: command CHANGE (kind unknown),
    confidence from the region's strength above the threshold. A change of the
    whole image (the camera moved, the light changed) is one whole-image
    difference flagged ``global: <causes>``."""

    name = "changemap"

    def __init__(self, params: ChangeMapParams | None = None) -> None:
        self.params = params or ChangeMapParams()

    def detect(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        out = []
        for s in batch:
            cm = sample_change_map(s, self.params)
            diffs = [Difference(CHANGE, None, r.box_norm, r.confidence, "change strength",
                                flags=[f"global: {r.cause}"] if r.kind == "global" else [])
                     for r in cm.regions]
            out.append(DiceResult(diffs, detector=self.name))
        return out
