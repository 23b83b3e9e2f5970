"""Differences and verdicts, shared by both detectors and everything downstream."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

COMMANDS = ("ADD", "REMOVE", "EDIT")
#: The model-free detector cannot tell the kind of change.
CHANGE = "CHANGE"


@dataclass
class Difference:
    """One detected difference. ``box`` is ``(x0, y0, x1, y1)`` as fractions
    of the image size. ``confidence`` is ``None`` when it cannot be known
    (``confidence_source`` says why), never a stand-in 1."""

    command: str
    object: str | None
    box: tuple[float, float, float, float]
    confidence: float | None = None
    confidence_source: str | None = None  # "logprobs", "change strength", "unavailable: ..."
    flags: list[str] = field(default_factory=list)
    char_offset: int | None = None  # where the command starts in the raw answer

    @property
    def area(self) -> float:
        x0, y0, x1, y1 = self.box
        return max(0.0, x1 - x0) * max(0.0, y1 - y0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("char_offset")
        d["box"] = [round(v, 5) for v in self.box]
        if not d["flags"]:
            d.pop("flags")
        return d


@dataclass
class Verdict:
    """Coherence of one difference with the instruction."""

    coherent: bool | None  # None: the answer could not be parsed (raw kept)
    p_yes: float | None = None
    reasoning: str | None = None
    raw: str | None = None
    problem: str | None = None
    ensemble: dict[str, Any] | None = None  # samples, votes, agreement (self-ensembling)
    raws: list[str | None] | None = None  # every sampled answer
    #: the question was never answered (a model or transport error): redone on rerun, never a verdict
    failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and not (k == "failed" and not v)}


@dataclass
class DiceResult:
    differences: list[Difference]
    verdicts: list[Verdict] | None = None  # None when no coherence estimator ran
    detector: str = ""
    raw: str | None = None
    unparsable: bool = False
    problem: str | None = None
    #: the detector was never answered (a model or transport error): the sample fails, redone on rerun
    failed: bool = False
    #: the detector's answer was cut off at the token limit: the list may be incomplete
    truncated: bool = False
    #: lines that looked like differences but were left out, with the reason
    rejected: list[str] = field(default_factory=list)
    #: where the confidences were read (released-style models: "logits" or "scores")
    confidence_from: str | None = None
    #: how this sample's run differed from the released pipeline beyond the run-wide differences (e.g. boxes on
    #: a non-square image, which the release misplaces and editlens maps exactly)
    differences_from_release: list[str] = field(default_factory=list)
    #: released-style models: whether this sample ran as the release runs it (``None``: not a released model)
    identical_to_release: bool | None = None
    #: per stage ("detector", "coherence"), on an inference engine: where the probabilities came from
    #: (exact ids, the engine's top log-probabilities, after penalties) and the share of candidate steps
    #: that lacked a candidate's value
    probability_source: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: released-style models: how the detector's answer was read ("editlens" or "release") and where each
    #: stage's processor came from (see :mod:`editlens.dice.released`)
    answer_reading: str | None = None
    processor_source: dict[str, str] = field(default_factory=dict)

    @property
    def no_change(self) -> bool:
        """Judged to show no change: only from a complete, parsed answer listing nothing."""
        return not self.unparsable and not self.failed and not self.truncated and not self.differences

    @property
    def judged(self) -> bool:
        return self.verdicts is not None and all(v.coherent is not None for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        diffs = []
        for i, d in enumerate(self.differences):
            item = d.to_dict()
            if self.verdicts is not None:
                item["verdict"] = self.verdicts[i].to_dict()
            diffs.append(item)
        out: dict[str, Any] = {"detector": self.detector, "differences": diffs, "no_change": self.no_change}
        if self.verdicts is None:  # no coherence estimator ran: even "no difference" is not a verdict
            out["coherence"] = "not judged"
        if self.unparsable:
            out["unparsable"] = True
        if self.failed:
            out["failed"] = True
        if self.truncated:
            out["truncated"] = True
        if self.rejected:
            out["rejected"] = list(self.rejected)
        if self.confidence_from:
            out["confidence_from"] = self.confidence_from
        if self.identical_to_release is not None:
            out["identical_to_release"] = self.identical_to_release
        if self.differences_from_release:
            out["differences_from_release"] = list(self.differences_from_release)
        if self.probability_source:
            out["probability_source"] = {k: dict(v) for k, v in self.probability_source.items()}
        if self.answer_reading:
            out["answer_reading"] = self.answer_reading
        if self.processor_source:
            out["processor_source"] = dict(self.processor_source)
        if self.raw is not None:
            out["raw"] = self.raw
        if self.problem:
            out["problem"] = self.problem
        return out
