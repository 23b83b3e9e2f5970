"""The data of a run report, declared once: what :func:`~editlens.reporting.collect.collect_run`
gives (:class:`RunData`, its edits :class:`SampleRecord`), and what the page's script
(``assets/report.js``) receives as JSON (:class:`PagePayload`, its edits :class:`PageSample`).

The HTML writer (:func:`~editlens.reporting.html.render_run_report`) reads a
:class:`RunData` and makes the :class:`PagePayload` from it; the page reads
``DATA.<field>`` of exactly the fields declared here (a test holds the script
to them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, NotRequired, Sequence, TypedDict

from editlens.reporting.markup import script_json


class Box(TypedDict):
    """One box an evaluator found on an edit (:func:`~editlens.reporting.collect.boxes_of`)."""

    by: str  # the evaluator
    i: int  # its index in the evaluator's list
    n: int  # its number on the edit, from 1
    box: list[float]  # x0, y0, x1, y1 as fractions of the image
    on: list[str]  # the images it is drawn on
    kind: str | None
    colour: str
    dashed: bool
    label: str
    verdict: str | None
    rank: float | None
    fields: list[list[Any]]  # [name, value] pairs shown with it


class ScoreEntry(TypedDict):
    """One evaluator's result of one edit."""

    status: str
    value: float | None
    reason: NotRequired[str]
    details: NotRequired[dict[str, Any]]


class SampleRecord(TypedDict, total=False):
    """One edit as collected: its manifest row's part, then what its results give."""

    id: str
    model: str
    instruction: str
    category: str
    columns: dict[str, Any]
    images: dict[str, str]  # role -> file path or table-cell reference (never sent to the page)
    group: int  # its row of the compare view (one source and instruction)
    human: float
    scores: dict[str, ScoreEntry]
    boxes: list[Box]
    verdicts: list[str]
    unchanged: list[str]
    change_checked: bool
    statuses: list[str]
    input_notes: list[str]
    _key: tuple  # the content key of its results and images (see ReportCache.samples)


class RunData(TypedDict):
    """Everything a run report shows (:func:`~editlens.reporting.collect.collect_run`)."""

    kind: str
    title: str
    #: set when the scores came from editlens' scripted judge (not a real judge): shown first everywhere
    warning: str | None
    run_dir: str
    run: dict[str, Any]
    completeness: dict[str, Any]
    evaluators: list[str]
    scored_evaluators: list[str]
    higher_is_better: dict[str, bool | None]
    measures: dict[str, str | None]
    measure_labels: dict[str, str]
    descriptions: dict[str, str]
    layers: dict[str, dict[str, Any]]
    unchanged_evaluators: list[str]
    models: list[str]
    categories: list[str]
    category_column: str
    groups: list[dict[str, Any]]
    source_totals: dict[str, int]
    samples: list[SampleRecord]
    per_model: list[dict[str, Any]]
    leaderboard: dict[str, Any]
    summaries: list[dict[str, Any]]
    human: dict[str, Any] | None
    notes: list[str]
    probe: dict[str, Any] | None
    arena: dict[str, Any] | None
    meta_eval: NotRequired[dict[str, Any]]  # added by write_run_report: saved meta-evaluations shown with the run


class PageImage(TypedDict, total=False):
    """One image of an edit as the page gets it: a thumbnail key and sizes, and where the
    full-size image is (an embedded key ``f``, a link ``href``, or neither), or an error."""

    t: str
    w: int
    h: int
    tw: int
    th: int
    f: str
    href: str
    error: str


class PageSample(TypedDict, total=False):
    """One edit as the page gets it."""

    id: str
    model: str
    instruction: str
    category: str
    group: int
    human: float
    columns: dict[str, Any]
    images: dict[str, PageImage]
    scores: dict[str, ScoreEntry]  # a box layer's items left out of the details (they are in boxes)
    boxes: list[Box]
    verdicts: list[str]
    unchanged: list[str]
    statuses: list[str]
    input_notes: list[str]


#: the fields of a :class:`PageSample` taken from its record as they are, made on every build
SAMPLE_LIGHT = ("id", "model", "instruction", "category", "group", "human", "columns")
#: the fields its results give, made once per content (see ReportCache.fragments)
SAMPLE_HEAVY = ("boxes", "verdicts", "unchanged", "statuses", "input_notes")


def _json_name(name: str) -> str:
    """The name the page reads a field by (the script's camelCase)."""
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


@dataclass
class PagePayload:
    """The JSON the page's script reads as ``DATA`` (``<script id="report-data">``); field
    ``measure_labels`` is ``DATA.measureLabels`` and so on (:meth:`json_names`)."""

    evaluators: list[str]
    scored: list[str]  # evaluators with at least one scored edit
    measures: dict[str, str | None]
    measure_labels: dict[str, str]
    hib: dict[str, bool | None]  # higher is better, per evaluator
    layers: dict[str, dict[str, Any]]
    descriptions: dict[str, str]
    models: list[str]
    groups: list[dict[str, Any]]  # source file name and instruction of each compare row
    leaderboard: dict[str, Any]  # its tables, scopes and no-op flags
    human: dict[str, Any] | None
    samples: list[PageSample] = field(default_factory=list)

    @classmethod
    def json_names(cls) -> list[str]:
        """The page's names of the fields, in order.

        >>> PagePayload.json_names()[:5]
        ['evaluators', 'scored', 'measures', 'measureLabels', 'hib']
        """
        return [_json_name(f.name) for f in fields(cls)]

    @classmethod
    def from_run(cls, data: RunData | Mapping[str, Any]) -> PagePayload:
        """The payload of a collected run, without its samples (the HTML writer adds them)."""
        return cls(
            evaluators=data["evaluators"], scored=data["scored_evaluators"], measures=data.get("measures", {}),
            measure_labels=data.get("measure_labels", {}), hib=data["higher_is_better"],
            layers=data.get("layers") or {}, descriptions=data.get("descriptions", {}), models=data["models"],
            # file names only: the page holds no local path
            groups=[{"source": Path(g["source"]).name if g.get("source") else None, "instruction": g.get("instruction")}
                    for g in data.get("groups", [])],
            leaderboard={k: v for k, v in (data.get("leaderboard") or {}).items() if k in ("tables", "scopes", "noop")},
            human=data.get("human"))

    @classmethod
    def from_json(cls, text: str) -> PagePayload:
        """The payload a page holds (its ``report-data`` JSON); a field missing or not declared
        is a :class:`ValueError` naming it."""
        import json

        doc = json.loads(text)
        names = {_json_name(f.name): f.name for f in fields(cls)}
        missing, extra = [n for n in names if n not in doc], [n for n in doc if n not in names]
        if missing or extra:
            raise ValueError(f"not a report page's data: missing {missing}, undeclared {extra}")
        return cls(**{names[k]: v for k, v in doc.items()})

    def to_json(self, sample_json: Sequence[str] | None = None) -> str:
        """The payload as JSON safe inside a <script> element. ``sample_json``: the samples as
        JSON already (each a :class:`PageSample` made safe for a script, as the HTML writer
        keeps them between builds); else :attr:`samples` is serialised."""
        doc = {_json_name(f.name): getattr(self, f.name) for f in fields(self) if f.name != "samples"}
        if sample_json is None:
            return script_json({**doc, "samples": self.samples})
        return script_json(doc)[:-1] + ',"samples":[' + ",".join(sample_json) + "]}"
