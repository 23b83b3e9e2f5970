"""The judge of an editor benchmark: asks a vision-language model the
benchmark's questions about each edit (through the shared judge backends) and
reads each answer the way the benchmark defines.

An answer that cannot be read, a refusal or a content-filtered answer makes
the item *unscored* (missing, with the raw text and the reason), never a
zero; a lost request makes it *failed* (asked again on rerun). The prompts'
hash, the temperature and the seed are part of the judge's identity
(:meth:`BenchJudge.describe`), so a run with other prompts is a new result,
and the served model's identity is pinned by the backend's provenance.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from editlens.backends.types import ChatRequest, GenerationSettings, Message, is_backend_failure
from editlens.bench.base import BenchItem, Benchmark, Question
from editlens.bench.prompts import PromptSet
from editlens.core.types import LoadedEdit, Score
from editlens.judges.base import VLMJudge
from editlens.judges.parsing import refusal_in
from editlens.metrics.spec import MetricSpec

_MARK = re.compile(r"^\s*<<(\w+)>>\s*$", re.M)


def message_parts(q: Question, images: Mapping[str, Any]) -> list[Any]:
    """Text and images in the order the question shows them, each image
    preceded by its caption when the question has captions. Image markers
    (``<<source>>`` on a line of their own) in the text place the images;
    without markers, ``q.images`` go after the text (before, with ``images_first``)."""
    captions = dict(zip(q.images, q.captions))

    def shown(role: str) -> list[Any]:
        return ([captions[role]] if captions.get(role) else []) + [images[role]]

    parts: list[Any] = []
    if _MARK.search(q.text):
        pos = 0
        for m in _MARK.finditer(q.text):
            chunk = q.text[pos:m.start()].strip()
            if chunk:
                parts.append(chunk)
            parts += shown(m.group(1))
            pos = m.end()
        tail = q.text[pos:].strip()
        if tail:
            parts.append(tail)
        return parts
    imgs = [p for role in q.images for p in shown(role)]
    return imgs + [q.text] if q.images_first else [q.text] + imgs


def question_images(q: Question, sample: LoadedEdit, item: BenchItem,
                    loaded: dict[str, Any] | None = None) -> dict[str, Any]:
    """The decoded image of every role ``q`` shows: ``source``, ``edited`` and ``reference``
    from the loaded sample, ``source:N`` (N > 0) decoded from the item's Nth source at its own
    size (``loaded`` keeps them across one item's questions)."""
    from editlens.core.images import ImageLoadOptions, load_image

    loaded = {} if loaded is None else loaded
    out: dict[str, Any] = {}
    for role in q.images:
        if role in ("source", "source:0"):
            out[role] = sample.source
        elif role in ("edited", "reference"):
            out[role] = getattr(sample, role)
        elif role.startswith("source:") and role[7:].isdigit():
            n, sources = int(role[7:]), item.all_sources()
            if n >= len(sources):
                raise ValueError(f"{sample.id}: question {q.name} shows {role}, but the case has {len(sources)} "
                                 "source image(s)")
            if role not in loaded:
                loaded[role] = load_image(sources[n], ImageLoadOptions(), name=f"{item.id} {role}")[0]
            out[role] = loaded[role]
        else:
            raise ValueError(f"{sample.id}: question {q.name} shows an unknown image role {role!r}")
        if out[role] is None:
            raise ValueError(f"{sample.id}: question {q.name} shows an image the item lacks ({role})")
    return out


def judge_spec(bench: Benchmark) -> MetricSpec:
    """The metric spec of ``bench``'s judge: its per-item headline, higher is better, judging the edit."""
    return MetricSpec(f"bench_{bench.spec.name.replace('-', '_')}", BenchJudge, ("source", "edited"),
                      True, (0.0, float("inf")), "vlm", f"{bench.spec.title} judge", vlm="required",
                      size_policy=bench.spec.judge_image_sizes)


def spec_for_evaluator(name: str) -> MetricSpec | None:
    """The spec of a benchmark judge from its evaluator name (``bench_gedit``), for readers of a
    bench run's ``run/`` folder (reports, leaderboards); ``None`` when no benchmark has that judge."""
    from editlens.bench.registry import all_benchmarks

    for bench in all_benchmarks():
        if not bench.spec.metrics and bench.spec.label_kind == "none" \
                and f"bench_{bench.spec.name.replace('-', '_')}" == name:
            return judge_spec(bench)
    return None


def evaluator_spec(name: str) -> MetricSpec:
    """A registered metric's spec, or a benchmark judge's (:func:`spec_for_evaluator`), for readers of
    stored runs (``tune-editor RUN --score-metric bench_gedit``); unknown names raise as ``get_spec`` does."""
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec

    try:
        return get_spec(name)
    except UnknownMetricError:
        spec = spec_for_evaluator(name)
        if spec is None:
            raise
        return spec


class BenchJudge(VLMJudge):
    """A metric (for ``editlens run``'s resumable store) whose value is the
    benchmark's per-item headline and whose details hold every dimension."""

    template_names = ()

    def __init__(self, bench: Benchmark, prompts: PromptSet, items: Mapping[str, BenchItem], **vlm_options: Any) -> None:
        self.bench, self.prompts, self.items = bench, prompts, items
        self.spec = judge_spec(bench)
        super().__init__(**vlm_options)
        # the engine check asks for room for the most images one question shows (multi-image cases)
        distinct = {id(it): it for it in items.values()}.values()
        self.images_per_prompt = max([len(q.images) or len(_MARK.findall(q.text)) for it in distinct
                                      for q in bench.questions(it, prompts)]
                                     + [type(self).images_per_prompt])

    def describe(self) -> dict[str, Any]:
        # no backend.describe() here: the identity must not need the model loaded (estimates, resumes)
        return {"name": self.name, "benchmark": self.bench.spec.name, "prompts": self.prompts.describe(),
                "vlm": str(self.vlm), "vlm_model": self.vlm_model, "temperature": self.temperature,
                "seed": self.seed, "samples": self.samples, "max_new_tokens": self.max_new_tokens}

    def provenance(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        return {"backend": backend_provenance(self.backend), "prompts": self.prompts.describe()}

    def plan(self, item: BenchItem) -> list[Question]:
        return self.bench.questions(item, self.prompts)

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        plans, reqs = [], []
        for s in batch:
            item = self.items[s.id]
            qs = self.plan(item)
            plans.append(qs)
            loaded: dict[str, Any] = {}
            for q in qs:
                images = question_images(q, s, item, loaded)
                reqs.append(ChatRequest([Message("user", message_parts(q, images))], settings))
        answers = self.ask(reqs)
        out: list[float | Score] = []
        k = 0
        for s, qs in zip(batch, plans):
            gens = answers[k:k + len(qs)]
            k += len(qs)
            out.append(self._score(self.items[s.id], qs, [g[0] for g in gens]))
        return out

    def _score(self, item: BenchItem, qs: Sequence[Question], gens: Sequence[Any]) -> Score:
        raw = {q.name: g.text for q, g in zip(qs, gens)}
        for q, g in zip(qs, gens):
            if is_backend_failure(g.problem):
                return Score(self.name, None, "failed", f"{q.name}: {g.problem}", {"raw": raw})
        dims: dict[str, float] = {}
        problems = []
        for q, g in zip(qs, gens):
            refused = g.refusal or refusal_in(g.text) or (
                "content filter" if g.finish_reason == "content_filter" else None)
            if refused:
                problems.append(f"{q.name}: the judge refused ({refused})")
                continue
            if g.problem:
                problems.append(f"{q.name}: {g.problem}")
                continue
            values = self.bench.parse_answer(q, g.text, self.prompts.from_clone)
            if values is None or len(values) != len(q.dimensions):
                problems.append(f"{q.name}: answer not readable as {len(q.dimensions)} score(s) "
                                f"{list(q.dimensions)} in [{q.low:g}, {q.high:g}]")
                continue
            dims.update(zip(q.dimensions, values))
        if problems:
            # missing, never zero: what did parse is kept for inspection, not scored
            return Score(self.name, None, "unscored", "; ".join(problems),
                         {"raw": raw, "dimensions_read": dims, "refused": any("refused" in p for p in problems)})
        figures = self.bench.item_scores(item, dims)
        headline = self.bench.headline(figures)
        return Score(self.name, headline, details={"dimensions": dims, "figures": figures, "raw": raw})


def estimate(bench: Benchmark, items: Sequence[BenchItem], prompts: PromptSet, models: int, max_new_tokens: int,
             image_tokens: int = 800) -> dict[str, Any]:
    """Judge calls and rough tokens a run makes before it starts: the plan of
    every item, per model. Prompt tokens count ~4 characters per token plus
    ``image_tokens`` per image (a 512-px image costs 500-1,100 tokens on the
    common APIs); completion tokens are at most ``max_new_tokens`` per call."""
    calls = text_chars = images = 0
    for it in items:
        for q in bench.questions(it, prompts):
            calls += 1
            text_chars += len(q.text) + sum(len(c) for c in q.captions)
            images += len(q.images) or len(_MARK.findall(q.text))
    prompt_tokens = text_chars // 4 + images * image_tokens
    return {"benchmark": bench.spec.name, "items": len(items), "models": models, "judge_calls": calls * models,
            "prompt_tokens_approx": prompt_tokens * models, "completion_tokens_max": calls * models * max_new_tokens,
            "image_tokens_per_image_assumed": image_tokens, "prompts": prompts.describe()}
