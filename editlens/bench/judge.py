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

from editlens.backends.engine import PROBE_TEXT
from editlens.backends.types import ChatRequest, GenerationSettings, Message, is_backend_failure
from editlens.bench.base import BenchItem, Benchmark, Question
from editlens.bench.prompts import PromptSet
from editlens.core.types import LoadedEdit, Score
from editlens.errors import InputError
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


class BenchJudge(VLMJudge):
    """A metric (for ``editlens run``'s resumable store) whose value is the
    benchmark's per-item headline and whose details hold every dimension.

    ``answers`` (:data:`~editlens.bench.base.ANSWER_POLICIES`) picks the reading the value follows;
    every answer is read under both policies and both are kept (``details["by_policy"]``), so the
    table can say how many items the two read differently, and switching policy re-reads stored
    answers without asking again. ``images`` (:data:`~editlens.bench.base.IMAGE_POLICIES`) says how
    images are sent: ``release`` as the benchmark's spec describes its release (``release_images``),
    ``editlens`` decoded and re-encoded as PNG. ``edited_files`` (sample id -> the edit's file) lets
    a release that sends files' bytes send the edit's; ``probe=False`` skips the engine's start-up
    capability probe (one request)."""

    template_names = ()

    def __init__(self, bench: Benchmark, prompts: PromptSet, items: Mapping[str, BenchItem], *,
                 answers: str = "release", images: str = "release", edited_files: Mapping[str, Any] | None = None,
                 probe: bool = True, **vlm_options: Any) -> None:
        from editlens.bench.base import ANSWER_POLICIES, IMAGE_POLICIES

        if answers not in ANSWER_POLICIES:
            raise InputError(f"--answers must be one of {', '.join(ANSWER_POLICIES)}, got {answers!r}")
        if images not in IMAGE_POLICIES:
            raise InputError(f"--images must be one of {', '.join(IMAGE_POLICIES)}, got {images!r}")
        self.bench, self.prompts, self.items = bench, prompts, items
        self.answers, self.images, self.probe_engine = answers, images, probe
        self.edited_files = dict(edited_files or {})
        release = bench.spec.release_images
        sizes = release.sizes if images == "release" and release else bench.spec.judge_image_sizes
        self.spec = MetricSpec(f"bench_{bench.spec.name.replace('-', '_')}", type(self), ("source", "edited"),
                               True, (0.0, float("inf")), "vlm", f"{bench.spec.title} judge", vlm="required",
                               size_policy=sizes)
        super().__init__(**vlm_options)
        # the engine check asks for room for the most images one question shows (multi-image cases)
        distinct = {id(it): it for it in items.values()}.values()
        self.images_per_prompt = max([len(q.images) or len(_MARK.findall(q.text)) for it in distinct
                                      for q in bench.questions(it, prompts)]
                                     + [type(self).images_per_prompt])

    def describe(self) -> dict[str, Any]:
        # no backend.describe() here: the identity must not need the model loaded (estimates, resumes).
        # The answer policy is not part of it (both readings are stored); how images are sent is.
        d = {"name": self.name, "benchmark": self.bench.spec.name, "prompts": self.prompts.describe(),
             "vlm": str(self.vlm), "vlm_model": self.vlm_model, "temperature": self.temperature,
             "seed": self.seed, "samples": self.samples, "max_new_tokens": self.max_new_tokens}
        if self.images == "release" and self.bench.spec.release_images:
            d["images"] = {"as": "release", **self.bench.spec.release_images.describe()}
        return d

    def provenance(self) -> dict[str, Any]:
        from editlens.backends.types import backend_provenance

        return {"backend": backend_provenance(self.backend), "prompts": self.prompts.describe()}

    def plan(self, item: BenchItem) -> list[Question]:
        return self.bench.questions(item, self.prompts)

    def sent_images(self, q: Question, sample: LoadedEdit, item: BenchItem, loaded: dict[str, Any]) -> dict[str, Any]:
        """Every role's image as it is sent: decoded arrays (``--images editlens``: the backend encodes
        PNG) or the release's encoding (:func:`~editlens.bench.sending.encode_for_release`)."""
        how = q.sending or self.bench.spec.release_images
        if self.images == "editlens" or how is None:  # (a benchmark whose release sends images as editlens)
            return question_images(q, sample, item, loaded)
        from editlens.bench.sending import encode_for_release, opened_size

        out = {}
        for role in q.images:
            key = f"sent:{role}:{id(how)}"
            if key not in loaded:
                if role in ("source", "source:0"):
                    src: Any = item.all_sources()[0]
                elif role == "edited":
                    src = self.edited_files.get(sample.id)
                    if src is None:  # an edit handed over in memory: what was loaded (at its own size)
                        src = sample.edited_native if sample.edited_native is not None else sample.edited
                elif role == "reference":
                    src = item.reference
                elif role.startswith("source:") and role[7:].isdigit() and int(role[7:]) < len(item.all_sources()):
                    src = item.all_sources()[int(role[7:])]
                else:
                    raise ValueError(f"{sample.id}: question {q.name} shows an unknown image role {role!r}")
                if src is None:
                    raise ValueError(f"{sample.id}: question {q.name} shows an image the item lacks ({role})")
                size = None
                if role in ("edited", "reference") and how.sizes == "source":
                    if "sent:size" not in loaded:
                        loaded["sent:size"] = opened_size(item.all_sources()[0], how, f"{item.id} source")
                    size = loaded["sent:size"]
                loaded[key] = encode_for_release(src, how, f"{sample.id} {role}", size)
            out[role] = loaded[key]
        return out

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        plans, reqs = [], []
        for s in batch:
            item = self.items[s.id]
            qs = self.plan(item)
            plans.append(qs)
            loaded: dict[str, Any] = {}
            for q in qs:
                images = self.sent_images(q, s, item, loaded)
                reqs.append(ChatRequest([Message("user", message_parts(q, images))], settings))
        answers = self.ask(reqs)
        out: list[float | Score] = []
        k = 0
        for s, qs in zip(batch, plans):
            gens = answers[k:k + len(qs)]
            k += len(qs)
            out.append(self._score(self.items[s.id], qs, [g[0] for g in gens]))
        return out

    def read_item(self, item: BenchItem, qs: Sequence[Question], gens: Sequence[Any], policy: str) -> dict[str, Any]:
        """The item under one answer policy: ``status`` (scored/unscored), ``value`` (the headline),
        ``figures``, ``dimensions`` read, ``reason``, ``readings`` (question -> its reading),
        ``invented`` (answers the release would have made a value up for) and ``refused``."""
        dims: dict[str, float] = {}
        problems, readings, invented, refused = [], {}, 0, False
        for q, g in zip(qs, gens):
            why = g.refusal or refusal_in(g.text) or (
                "content filter" if g.finish_reason == "content_filter" else None)
            if g.problem:
                problems.append(f"{q.name}: {g.problem}")
                readings[q.name] = {"values": None, "problem": g.problem}
                continue
            if why and not (policy == "release" and self.prompts.from_clone):  # the release's parser reads any text
                problems.append(f"{q.name}: the judge refused ({why})")
                readings[q.name] = {"values": None, "problem": f"refused ({why})"}
                refused = True
                continue
            r = self.bench.read_answer(q, g.text, self.prompts.from_clone, policy)
            readings[q.name] = r.to_dict()
            invented += int(r.invented)
            if r.values is None:
                refused = refused or bool(why)
                problems.append(f"{q.name}: " + (f"the judge refused ({why})" if why else
                                                   r.problem or "answer not readable"))
                continue
            dims.update(r.values)
            lacking = [d for d in q.dimensions if d not in r.values]
            if lacking and self.bench.spec.keep_readable_dimensions:  # one answer, some of its scores read
                problems.append(f"{q.name}: {', '.join(lacking)} not read")
        out: dict[str, Any] = {"readings": readings, "dimensions": dims, "invented": invented, "refused": refused}
        keep = self.bench.spec.keep_readable_dimensions and dims
        if problems and not keep:
            # missing, never zero: what did parse is kept for inspection, not scored
            return {**out, "status": "unscored", "value": None, "figures": {}, "reason": "; ".join(problems)}
        figures = self.bench.item_scores(item, dims)
        return {**out, "status": "scored", "value": self.bench.headline(figures), "figures": figures,
                "reason": ("; ".join(problems) + " (the other dimensions are kept)") if problems else None}

    def _score(self, item: BenchItem, qs: Sequence[Question], gens: Sequence[Any]) -> Score:
        from editlens.bench.base import ANSWER_POLICIES

        raw = {q.name: g.text for q, g in zip(qs, gens)}
        for q, g in zip(qs, gens):
            if is_backend_failure(g.problem):
                return Score(self.name, None, "failed", f"{q.name}: {g.problem}", {"raw": raw})
        by = {p: self.read_item(item, qs, gens, p) for p in ANSWER_POLICIES}
        mine = by[self.answers]
        details = {"raw": raw, "answers": self.answers, "by_policy": by}
        if mine["status"] != "scored":
            return Score(self.name, None, "unscored", mine["reason"],
                         {**details, "dimensions_read": mine["dimensions"], "refused": mine["refused"]})
        return Score(self.name, mine["value"], reason=mine["reason"],
                     details={**details, "dimensions": mine["dimensions"], "figures": mine["figures"]})


def read_differently(by_policy: Mapping[str, Any]) -> bool:
    """Whether the two answer policies read an item differently (another status or other figures)."""
    a, b = (by_policy.get(p) or {} for p in ("release", "strict"))
    return (a.get("status"), a.get("figures")) != (b.get("status"), b.get("figures"))


def estimate(bench: Benchmark, items: Sequence[BenchItem], prompts: PromptSet, models: int, max_new_tokens: int,
             image_tokens: int = 800, probe: bool = False) -> dict[str, Any]:
    """Judge calls and rough tokens a run makes before it starts: the plan of
    every item, per model. Prompt tokens count ~4 characters per token plus
    ``image_tokens`` per image (a 512-px image costs 500-1,100 tokens on the
    common APIs); completion tokens are at most ``max_new_tokens`` per call.
    With ``probe`` (a judge on an engine URL, not ``--no-probe``) the start-up
    capability probe is counted too: one request with as many images as the
    largest prompt and a one-token answer (``probe_calls``; ``calls_total``)."""
    calls = text_chars = images = most = 0
    for it in items:
        for q in bench.questions(it, prompts):
            calls += 1
            text_chars += len(q.text) + sum(len(c) for c in q.captions)
            n = len(q.images) or len(_MARK.findall(q.text))
            images += n
            most = max(most, n)
    prompt_tokens = text_chars // 4 + images * image_tokens
    probe_calls = 1 if probe and calls else 0
    probe_tokens = probe_calls * (max(most, 1) * image_tokens + len(PROBE_TEXT) // 4)
    return {"benchmark": bench.spec.name, "items": len(items), "models": models, "judge_calls": calls * models,
            "probe_calls": probe_calls, "calls_total": calls * models + probe_calls,
            "prompt_tokens_approx": prompt_tokens * models + probe_tokens,
            "completion_tokens_max": calls * models * max_new_tokens + probe_calls,
            "image_tokens_per_image_assumed": image_tokens, "prompts": prompts.describe()}
