"""The two difference detectors. Both return :class:`DiceResult` objects
with the same :class:`Difference` type, so everything downstream works with
either."""

from __future__ import annotations

from typing import Any, Sequence

from editlens.backends.types import ChatRequest, GenerationSettings, Message
from editlens.core.types import LoadedEdit
from editlens.dice.confidence import assign_confidence
from editlens.dice.parsing import parse_differences
from editlens.dice.types import CHANGE, COMMANDS, DiceResult, Difference
from editlens.judges.templates import Template, load_template
from editlens.metrics.changemap import ChangeMapParams, sample_change_map


class MLLMDetector:
    """Asks a multi-image VLM for the differences, without the instruction
    (the detector must see what changed, not what was asked)."""

    name = "mllm"

    def __init__(self, backend: Any, template: Template | None = None, max_new_tokens: int = 256) -> None:
        self.backend = backend
        self.template = template or load_template("dice_detect")
        self.max_new_tokens = max_new_tokens

    def detect(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        reqs = [ChatRequest([Message("user", self.template.render({"source": s.source, "edited": s.edited}))],
                            settings, COMMANDS) for s in batch]
        out = []
        for s, g in zip(batch, self.backend.generate(reqs)):
            if g.problem:
                out.append(DiceResult([], detector=self.name, raw=g.text, unparsable=True, problem=g.problem))
                continue
            h, w = s.source.shape[:2]
            diffs = parse_differences(g.text, (w, h))
            if diffs is None:
                out.append(DiceResult([], detector=self.name, raw=g.text, unparsable=True,
                                      problem="no 'COMMAND: object, [x0, y0, x1, y1]' line in the answer"))
                continue
            assign_confidence(g, diffs)
            out.append(DiceResult(diffs, detector=self.name, raw=g.text))
        return out


class ChangeMapDetector:
    """The model-free change map as a detector: command CHANGE (kind unknown),
    confidence from the region's strength above the threshold."""

    name = "changemap"

    def __init__(self, params: ChangeMapParams | None = None) -> None:
        self.params = params or ChangeMapParams()

    def detect(self, batch: Sequence[LoadedEdit]) -> list[DiceResult]:
        out = []
        for s in batch:
            cm = sample_change_map(s, self.params)
            diffs = [Difference(CHANGE, None, r.box_norm, r.confidence, "change strength") for r in cm.regions]
            out.append(DiceResult(diffs, detector=self.name))
        return out
