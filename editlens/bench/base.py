"""The one shape of a benchmark: what it is (data), how to read it, how to score it.

A benchmark is a subclass of :class:`Benchmark` whose class attribute
``spec`` (a :class:`BenchSpec`: plain data) says where it comes from, the
exact download command, which columns mean what, its categories and
languages, its label kind and its table layout; its methods read the files
as the owner publishes them and compute the owner's protocols. It is
registered with :func:`editlens.bench.registry.register` (built-ins) or an
entry point in the ``editlens.benchmarks`` group (other packages); the CLI,
the runner and the reports know a benchmark only through this shape.

Editor benchmarks (``label_kind == "none"``) yield :class:`BenchItem` rows and
say where an editor's output for each lies (:meth:`Benchmark.output_candidates`);
their score comes from a judge plan (:meth:`Benchmark.questions`) or a metric
suite (``spec.metrics``) and the protocol (:meth:`Benchmark.table`).
Human-label benchmarks (``pointwise``/``pairwise``/``ranked``) read people's
labels (:meth:`Benchmark.labels`) and name their meta-evaluation protocols
(``protocols``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

from editlens.errors import InputError

LABEL_KINDS = ("none", "pointwise", "pairwise", "ranked")
#: how ``bench run`` reads a judge's answers (``--answers``): ``release`` as the owner's scoring script
#: parses them (bit for bit, except that a value the release would make up, e.g. a random fallback, stays
#: *unscored* and is counted), ``strict`` with editlens' honest reader (the exact answer format or nothing)
ANSWER_POLICIES = ("release", "strict")
#: how ``bench run`` sends images to the judge (``--images``): ``release`` as the owner's script sends them
#: (:attr:`BenchSpec.release_images`), ``editlens`` decoded and re-encoded as PNG (:attr:`BenchSpec.judge_image_sizes`)
IMAGE_POLICIES = ("release", "editlens")
#: how a release encodes an image it sends (:class:`ImageSending`)
IMAGE_ENCODINGS = ("png", "jpeg", "file")


@dataclass(frozen=True)
class ImageSending:
    """How a benchmark's release sends each image to its judge, as data (``BenchSpec.release_images``).

    ``encoding``: ``file`` (the image file's own bytes, unchanged), ``jpeg`` (decoded then saved as JPEG
    with PIL at ``quality``, PIL's default 75 when ``None``) or ``png`` (decoded, RGB, saved as PNG: what
    editlens sends). ``sizes``: ``source`` (the edited and reference images resized to the source's size
    with PIL's default filter before encoding, as GEdit-Bench's script does) or ``native`` (each at its own
    size). ``max_side``: shrink to fit a ``max_side`` square first (PIL ``thumbnail``). ``rgb``: ``always``
    (convert to RGB) or ``alpha_or_palette`` (only RGBA and palette images, as RISEBench's script does).
    ``exif_transpose``: apply the EXIF orientation first. ``mime``: the type the data URL names (``None``:
    the encoding's own; ImgEdit's script names ``image/png`` whatever the bytes are). ``detail``: the
    OpenAI ``detail`` field the release sets (``None``: not sent)."""

    encoding: str = "png"
    sizes: str = "source"
    max_side: int | None = None
    quality: int | None = None
    rgb: str = "always"
    exif_transpose: bool = False
    mime: str | None = None
    detail: str | None = None

    def __post_init__(self) -> None:
        if self.encoding not in IMAGE_ENCODINGS:
            raise ValueError(f"image encoding must be one of {IMAGE_ENCODINGS}, got {self.encoding!r}")
        if self.sizes not in ("source", "native"):
            raise ValueError(f"image sizes must be source or native, got {self.sizes!r}")
        if self.rgb not in ("always", "alpha_or_palette"):
            raise ValueError(f"image rgb must be always or alpha_or_palette, got {self.rgb!r}")
        if self.encoding == "file" and (self.max_side or self.sizes == "source"):
            raise ValueError("an image sent as its file's bytes cannot be resized (sizes must be native, no max_side)")

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Reading:
    """One judge answer read under one answer policy: ``values`` (dimension -> score) or ``None`` when
    it cannot be read (``problem`` says why); ``invented`` when the release would make a value up here
    (a random fallback: never scored, counted)."""

    values: dict[str, float] | None
    problem: str | None = None
    invented: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"values": self.values, "problem": self.problem, **({"invented": True} if self.invented else {})}


@dataclass(frozen=True)
class BenchSpec:
    """What a benchmark is, as data (``editlens bench info`` prints it)."""

    name: str
    title: str
    homepage: str
    #: where the files come from and the exact command that fetches them
    download: str
    #: how the published files are laid out (what :meth:`Benchmark.read` accepts)
    layout: str
    label_kind: str = "none"
    #: published column/field -> what it means to editlens (source, instruction, category, language...)
    columns: Mapping[str, str] = field(default_factory=dict)
    categories: Sequence[str] = ()
    languages: Sequence[str] = ()
    #: protocol name -> one line saying what it computes
    protocols: Mapping[str, str] = field(default_factory=dict)
    #: the paper's table: row groups and column names, in order
    table_layout: Mapping[str, Any] = field(default_factory=dict)
    #: where an editor's outputs go under ``--edits DIR/<model>/``
    outputs: str = ""
    #: the split scored when the published folder holds several
    split: str | None = None
    #: judge dimensions and their scale (editor benchmarks judged by a VLM)
    dimensions: Mapping[str, str] = field(default_factory=dict)
    #: metric suite (editor benchmarks scored by metrics): editlens metric name -> column in the paper
    metrics: Mapping[str, str] = field(default_factory=dict)
    #: where the official judge prompts live in the owner's repository (read from the user's clone)
    prompts_in_clone: str = ""
    #: what is identical to the owner's script, and what differs (docs/benchmarks-catalog.md)
    identical: str = ""
    differs: str = ""
    #: the command that scores it (human-label benchmarks: their `editlens meta-eval` command)
    usage: str = ""
    #: how a judge sees the edited and reference images: ``source`` (resized to the source's size) or
    #: ``native`` (each at its own size, as a release that sends its files unchanged)
    judge_image_sizes: str = "source"
    #: how the release sends images to its judge (``bench run --images release``, the default); ``None``:
    #: as editlens sends them (decoded, PNG, at ``judge_image_sizes``)
    release_images: ImageSending | None = None
    #: answer policy -> what it reads for this benchmark, and where the two readings differ (docs, tables)
    answer_policies: Mapping[str, str] = field(default_factory=dict)
    #: versions of the owner's scoring script this adapter reproduces: commit -> what it computes
    #: (the first is the default, ``bench run --release COMMIT`` picks another)
    releases: Mapping[str, str] = field(default_factory=dict)
    #: an item some of whose judge answers cannot be read keeps the dimensions that were read (as the
    #: release does) instead of being unscored as a whole
    keep_readable_dimensions: bool = False

    def __post_init__(self) -> None:
        if self.label_kind not in LABEL_KINDS:
            raise ValueError(f"benchmark {self.name}: label_kind {self.label_kind!r} is not one of {LABEL_KINDS}")
        if self.judge_image_sizes not in ("source", "native"):
            raise ValueError(f"benchmark {self.name}: judge_image_sizes must be source or native, "
                             f"got {self.judge_image_sizes!r}")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["release_images"] = self.release_images.describe() if self.release_images else None
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


@dataclass
class BenchItem:
    """One case of an editor benchmark, as the owner publishes it.

    ``source`` is a path or an image (decoded lazily: a PIL image opened on
    the embedded bytes); ``key`` names the editor's output file; ``extra``
    keeps every other published column (exported beside the scores).
    """

    id: str
    key: str
    instruction: str
    source: Any
    category: str
    language: str = "en"
    reference: Any = None
    source_caption: str | None = None
    target_caption: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the case whose edited output is this case's input when an editor makes the edits
    #: (multi-turn benchmarks: turn n edits the editor's own turn n-1), else ``None``
    after: str | None = None
    #: every source image in the published order when the case has several (``source`` is the
    #: first, the one an editor is given); empty for a one-image case
    sources: Sequence[Any] = ()

    def all_sources(self) -> list[Any]:
        """The case's source images in order (role ``source:N`` of a :class:`Question` is the Nth)."""
        return list(self.sources) or [self.source]


@dataclass
class Question:
    """One judge call about one item: its prompt text, the images it shows and
    how its answer is read. ``dimensions`` are the scores the answer holds,
    in order.

    ``images`` are roles, in the order they are shown: ``source`` (the case's
    first source), ``source:N`` (its Nth source, from 0, for cases with
    several), ``edited`` and ``reference``. ``captions``, when given, hold the
    text shown right before each image (one per role, ``""`` for none)."""

    name: str
    text: str
    images: Sequence[str]
    dimensions: Sequence[str]
    images_first: bool = False
    low: float = 1.0
    high: float = 5.0
    captions: Sequence[str] = ()
    #: how the release sends this question's images when it differs from the benchmark's
    #: ``spec.release_images`` (one of KRIS-Bench's scripts re-encodes JPEG where the others send files)
    sending: ImageSending | None = None
    #: which of the release's answer parsers reads this question (benchmarks whose scripts differ)
    reader: str = ""

    def __post_init__(self) -> None:
        if self.captions and len(self.captions) != len(self.images):
            raise ValueError(f"question {self.name}: {len(self.captions)} captions for {len(self.images)} images")


class Benchmark:
    """Base of every benchmark adapter; subclasses set ``spec`` and override what applies."""

    spec: ClassVar[BenchSpec]

    def __init__(self, split: str | None = None) -> None:
        #: the split read when the published folder holds several (default: the spec's)
        self.split = split or self.spec.split
        #: the answer policy the table is built with (:data:`ANSWER_POLICIES`; ``bench run --answers``)
        self.answers = "release"
        #: the version of the owner's scoring script reproduced (a key of ``spec.releases``; None: the first)
        self.release: str | None = None
        #: the part of the metric suite computed (``bench run --metrics``; all of ``spec.metrics`` by default)
        self.metrics: dict[str, str] = dict(self.spec.metrics)

    def release_version(self) -> str | None:
        """The owner's script version the protocol follows (``spec.releases``' first unless chosen)."""
        if self.release is not None and self.release not in self.spec.releases:
            raise InputError(f"benchmark {self.spec.name}: no release {self.release!r}; it reproduces "
                             + (", ".join(self.spec.releases) or "one version only"))
        return self.release or next(iter(self.spec.releases), None)

    # -------------------------------------------------------------- editor benchmarks
    def read(self, path: str | Path) -> list[BenchItem]:
        """The items, from the published files at ``path``."""
        raise InputError(f"benchmark {self.spec.name} has no editor cases to read (label kind "
                         f"{self.spec.label_kind}); it is scored by: {self.info()['usage']}")

    def output_candidates(self, item: BenchItem) -> list[str]:
        """Paths (relative to one model's output folder) where its edit of ``item`` may lie, in order."""
        return [f"{item.key}.png", f"{item.key}.jpg", f"{item.key}.jpeg", f"{item.key}.webp"]

    def questions(self, item: BenchItem, prompts: Any) -> list[Question]:
        """The judge calls for ``item`` with ``prompts`` (a :class:`~editlens.bench.prompts.PromptSet`:
        the clone's texts or the fallback)."""
        return []

    def prompt_names(self) -> list[str]:
        """Names of the prompt texts :meth:`questions` needs."""
        return []

    def clone_prompts(self, clone: Path) -> dict[str, str]:
        """The official prompt texts read from the user's clone of the owner's repository."""
        raise InputError(f"benchmark {self.spec.name}: reading prompts from a clone is not supported")

    def fallback_prompts(self) -> dict[str, str]:
        """editlens' own wording of the prompts (template files we wrote)."""
        from editlens.judges.templates import load_template

        return {n: load_template(f"bench_{self.spec.name.replace('-', '_')}_{n}").text for n in self.prompt_names()}

    def parse_answer(self, q: Question, text: str | None, from_clone: bool) -> list[float] | None:
        """The scores of one answer, or ``None`` when it cannot be read (the item is then
        unscored, never zero). Default: editlens' strict reader of a JSON ``score`` list."""
        from editlens.judges.parsing import read_scores

        scores, _, _ = read_scores(text, expected=len(q.dimensions), low=q.low, high=q.high)
        return scores

    def read_answer(self, q: Question, text: str | None, from_clone: bool, policy: str) -> Reading:
        """One answer read under ``policy`` (:data:`ANSWER_POLICIES`). ``strict`` is :meth:`parse_answer`;
        ``release`` is :meth:`release_answer` where the benchmark has the owner's parser, and applies
        only to the owner's prompts (``from_clone``): editlens' own prompts ask for editlens' format."""
        if policy not in ANSWER_POLICIES:
            raise InputError(f"answers must be one of {ANSWER_POLICIES}, got {policy!r}")
        if policy == "release" and from_clone:
            got = self.release_answer(q, text)
            if got is not None:
                return got
        values = self.parse_answer(q, text, from_clone)
        if values is None or len(values) != len(q.dimensions):
            return Reading(None, f"answer not readable as {len(q.dimensions)} score(s) {list(q.dimensions)} in "
                                 f"[{q.low:g}, {q.high:g}]")
        return Reading(dict(zip(q.dimensions, values)))

    def release_answer(self, q: Question, text: str | None) -> Reading | None:
        """The answer as the owner's script parses it, or ``None`` when the release reads answers as
        :meth:`parse_answer` does (the default)."""
        return None

    def item_scores(self, item: BenchItem, dims: Mapping[str, float]) -> dict[str, float]:
        """Per-item figures from the judged dimensions (what the table averages)."""
        return dict(dims)

    def headline(self, figures: Mapping[str, float]) -> float:
        """The one number an item's result row carries (its details hold the rest)."""
        return float(next(iter(figures.values())))

    def table(self, rows: Sequence[Mapping[str, Any]], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
        """The paper's table from per-item rows ``{"id", "model", "category", "language", "scores": {...},
        "status"}``; see :mod:`editlens.bench.table`."""
        raise NotImplementedError

    # -------------------------------------------------------------- human-label benchmarks
    def labels(self, path: str | Path, **options: Any) -> Any:
        """People's labels, read from the published files."""
        raise InputError(f"benchmark {self.spec.name} has no human labels (label kind {self.spec.label_kind})")

    #: protocol name -> function computing it (human-label benchmarks wrap editlens.meta)
    protocol_functions: ClassVar[Mapping[str, Callable[..., dict[str, Any]]]] = {}

    def run_protocol(self, name: str | None = None, **kwargs: Any) -> dict[str, Any]:
        fns = self.protocol_functions
        if not fns:
            raise InputError(f"benchmark {self.spec.name} has no meta-evaluation protocol")
        name = name or next(iter(fns))
        if name not in fns:
            raise InputError(f"benchmark {self.spec.name}: no protocol {name!r}; it has {', '.join(fns)}")
        return fns[name](**kwargs)

    def info(self) -> dict[str, Any]:
        d = self.spec.to_dict()
        if not d["usage"] and self.spec.label_kind == "none":
            d["usage"] = (f"editlens bench run {self.spec.name} --data DIR --edits OUTPUTS --out OUT"
                          + ("" if self.spec.metrics else " --vlm DIR|URL [--prompts-from CLONE]"))
        return {**d, "class": f"{type(self).__module__}:{type(self).__qualname__}"}


def finite(x: Any) -> float | None:
    """``x`` as a float when it is a finite number, else ``None``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def one_of(value: Any, allowed: Iterable[str], where: str, what: str) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise InputError(f"{where}: {what} {value!r} is not one of {allowed}")
    return str(value)
