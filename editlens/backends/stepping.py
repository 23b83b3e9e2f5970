"""Local generation that can stop between two tokens and go on later.

``editlens serve`` shares one model between many clients. Run to the end, a
2,000-token answer would hold every other client for its whole length, so
the server's scheduler (:class:`~editlens.backends.server.Batcher`) asks for
generation in slices: :func:`generate_some` generates until each answer is
done *or* the scheduler says to yield (``Control.pause``, checked after
every generated token). The answers of a batch that yielded come back as
:class:`Paused` states sharing one :class:`Group`: the model's key/value
cache and the prompt tensors of the batch. Passed back in, generation goes
on from that cache where it stopped, with nothing encoded again (a
request whose client left meanwhile is dropped from the cache), so a pause
costs no compute and its answers are those of an uninterrupted run.

Sampling draws each answer's tokens from its own seeded generator (sample k
of a request with seed s: a hash of ``(s, k)``), so a seeded answer does not
depend on what else shares its batch, nor on where it was paused.

Each answer also stops on its own (``Control.cancelled``) when its client is
gone, and streaming clients get its text as it grows (``Control.on_text``).

A long prompt is encoded (prefilled) in slices too: with
``Control.prefill_tokens`` set, a prompt longer than that many tokens is run
through the model a slice of at most that many tokens at a time, the cache
carried from slice to slice, and the scheduler may take the model between
two slices (``Control.pause`` is asked after each) exactly as between two
generated tokens. Each slice gets the position ids of the whole prompt and,
where transformers pre-encodes the images (``mm_encoder_outputs``), the
image features of the image tokens that fall in it, so an image may straddle
two slices; for a model whose images cannot be pre-encoded, every image token
of a prompt falls in one slice. The last slice is left to ``generate()``
(it goes on from the cache as a resumed batch does), so the answers are
those of one unsliced prefill up to float rounding (slices multiply
matrices of other shapes).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from editlens.backends.types import ChatRequest, Generation, TokenStep

#: ``Generation.error`` of an answer stopped because its client went away.
CANCELLED = "cancelled: the client went away"


@dataclass
class Row:
    """One answer (sample ``k`` of a request) being generated."""

    k: int
    ids: list[int] = field(default_factory=list)  # generated so far, over every slice
    steps: list[TokenStep] | None = None  # token log-probabilities (sample 0, when asked)
    rng: torch.Generator | None = None  # sampling only
    finish: str | None = None  # "stop", "length" or "cancelled" once done
    text: str = ""  # text streamed so far


@dataclass(eq=False)
class Group:
    """A batch paused between two tokens: what its generation needs to go on."""

    cache: Any  # the model's key/value cache (every row of ``members``)
    prompt: dict[str, torch.Tensor]  # per-token prompt tensors (input_ids, attention_mask, ...), batch order
    members: list[tuple[int, Row]]  # (id of the request's Paused state, its row), batch order
    model_state: dict[str, Any] = field(default_factory=dict)  # per-batch model attributes (Qwen's rope_deltas)
    prefill: "Prefill | None" = None  # while the prompt is being encoded in slices
    # the name generate() gave the cache, and takes it back under: transformers 5.2x calls it "cache",
    # earlier releases "past_key_values" (and reject the other name as an unused model kwarg)
    cache_name: str = "cache"


@dataclass(eq=False)
class Prefill:
    """A batch's prompt being encoded in slices: where each slice ends and what
    each needs besides the prompt's per-token tensors."""

    ends: list[int]  # prompt column where each slice run here ends; generate() encodes the rest
    positions: Any = None  # position ids of the whole prompt (sliced on the last dimension), when the model takes them
    features: list[dict[str, Any]] = field(default_factory=list)  # per slice: pre-encoded features of its image tokens
    raw: dict[str, Any] = field(default_factory=dict)  # image inputs not pre-encoded: all go with slice ``raw_at``
    raw_at: int = 0
    shared: dict[str, Any] = field(default_factory=dict)  # other model inputs every slice gets
    done: int = 0  # slices run so far

    @property
    def encoded(self) -> int:
        """Prompt columns in the cache."""
        return self.ends[self.done - 1] if self.done else 0


@dataclass(eq=False)
class Paused:
    """A request whose answers are partly generated; pass it back to go on."""

    rows: list[Row]
    prompt_tokens: int | None = None
    group: Group | None = None

    @property
    def generated(self) -> int:
        return sum(len(r.ids) for r in self.rows)

    @property
    def prefill_left(self) -> int:
        """Prompt tokens (columns of its batch) not encoded yet while its prompt is prefilled in slices."""
        pre = self.group.prefill if self.group is not None else None
        if pre is None:
            return 0
        return int(self.group.prompt["input_ids"].shape[1]) - pre.encoded  # type: ignore[union-attr]


@dataclass
class Control:
    """How a caller steers :func:`generate_some` while it runs.

    ``pause()``: yield the whole batch now (checked after every token).
    ``cancelled()``: per request, whether its client is gone (its answers stop).
    ``on_text(request index, k, new text)``: streamed text of answer ``k``.
    ``prefill_tokens``: encode a longer prompt in slices of at most this many
    tokens, ``pause()`` asked after each (``None``: in one step).
    ``on_prefill(request index, tokens encoded, prompt tokens)``: after each slice.
    """

    pause: Callable[[], bool] | None = None
    cancelled: Callable[[], Sequence[bool]] | None = None
    on_text: Callable[[int, int, str], None] | None = None
    prefill_tokens: int | None = None
    on_prefill: Callable[[int, int, int], None] | None = None
    prompt_tokens: Sequence[int | None] | None = None  # per request, when known (the server counts them)


def row_seed(seed: int | None, k: int) -> int:
    """The seed of sample ``k`` of a request seeded ``seed`` (any integer);
    unseeded requests get a fresh random one.

    >>> row_seed(7, 0) == row_seed(7, 0) != row_seed(7, 1) != row_seed(8, 0)
    True
    """
    if seed is None:
        return secrets.randbits(63)
    return int.from_bytes(hashlib.blake2b(f"{seed}:{k}".encode(), digest_size=8).digest(), "big") >> 1


def _fresh(req: ChatRequest, want_steps: bool, device: Any) -> Paused:
    s = req.settings
    rows = []
    for k in range(s.n):
        rng = None
        if s.temperature > 0:
            rng = torch.Generator(device=device)
            rng.manual_seed(row_seed(s.seed, k))
        rows.append(Row(k, steps=[] if want_steps and k == 0 else None, rng=rng))
    return Paused(rows)


#: model attributes a generation keeps between its steps, per batch (Qwen2-VL's rope offsets)
_STEP_STATE = ("rope_deltas",)


def _model_state(model: Any) -> dict[str, Any]:
    out = {}
    for name, module in model.named_modules():
        for attr in _STEP_STATE:
            value = getattr(module, attr, None)
            if value is not None:
                out[f"{name}.{attr}"] = value
    return out


def _restore(model: Any, state: dict[str, Any], rows: list[int] | None) -> None:
    modules = dict(model.named_modules())
    for key, value in state.items():
        name, _, attr = key.rpartition(".")
        if torch.is_tensor(value) and rows is not None and value.dim() > 0:
            value = value[rows]
        setattr(modules[name], attr, value)


@torch.inference_mode()
def generate_some(be: Any, reqs: Sequence[ChatRequest], states: Sequence[Paused | None],
                  control: Control | None = None) -> list[Generation | Paused]:
    """Generate for ``reqs`` (one settings group: same settings and candidates)
    until every answer is done or ``control.pause()`` says to yield.

    ``be`` is a :class:`~editlens.backends.local.TransformersBackend`;
    ``states[i]`` is what an earlier call returned for ``reqs[i]`` (``None``
    to start). Returns, per request, its :class:`Generation` when all its
    answers are done, else its :class:`Paused` state.
    """
    control = control or Control()
    settings, candidates = reqs[0].settings, reqs[0].candidates
    want_steps = bool(candidates) or settings.top_logprobs > 0 or any(r.logprob_tokens for r in reqs)
    asked = [tuple(r.logprob_tokens) for r in reqs]
    work = [s if s is not None else _fresh(r, want_steps, be.device) for r, s in zip(reqs, states)]
    groups = {id(st.group) for st in work if st.group is not None}
    if groups and (len(groups) > 1 or any(st.group is None for st in work)):
        raise ValueError("paused requests go on with the batch they were paused in, and only with it")
    group = work[0].group
    if group is None:
        live = [(i, row) for i, st in enumerate(work) for row in st.rows if row.finish is None]
        # a prompt that may be longer than a prefill slice is sliced, not prefilled in one shared step
        short = not control.prefill_tokens or all(
            p is not None and p <= control.prefill_tokens for p in (control.prompt_tokens or [None]))
        if live and settings.n > 1 and SHARED_PREFILL and short and len(live) == settings.n * len(work):
            # the n answers of a request continue one prefill of its prompt (not n copies of it)
            shared = _shared_prefill(be, reqs, work, live, settings.n)
            _run_slice(be, work, None, (shared, list(range(len(live)))), live, settings, candidates, want_steps,
                       control, asked)
        elif live:
            inputs = _prompt_inputs(be, reqs, live)
            for b, (i, _) in enumerate(live):
                if work[i].prompt_tokens is None:
                    work[i].prompt_tokens = int(inputs["attention_mask"][b].sum())
            group = _start_prefill(be, work, inputs, live, control.prefill_tokens)
            if group is None:
                _run_slice(be, work, inputs, None, live, settings, candidates, want_steps, control, asked)
    go_on = True
    if group is not None and group.prefill is not None:
        go_on = _prefill_slices(be, work, group, control)
    if group is not None and group.prefill is None and go_on:
        index = {id(st): i for i, st in enumerate(work)}
        keep = [b for b, (owner, row) in enumerate(group.members) if owner in index and row.finish is None]
        live = [(index[group.members[b][0]], group.members[b][1]) for b in keep]
        if live:
            _run_slice(be, work, None, (group, keep), live, settings, candidates, want_steps, control, asked)
    out: list[Generation | Paused] = []
    for st in work:
        if any(row.finish is None for row in st.rows):
            out.append(st)
            continue
        st.group = None  # done: the cache is not kept for it
        out.append(_generation(be, st, settings.n))
    return out


#: prefill each prompt once for all its samples (``n`` > 1), then copy its key/value cache per sample
SHARED_PREFILL = True


def _shared_prefill(be: Any, reqs: Sequence[ChatRequest], work: list[Paused], live: list[tuple[int, Row]],
                    n: int) -> Group:
    """One forward pass over each request's prompt but its last token, its
    cache repeated for the request's ``n`` rows (``live``: request-major):
    a paused-batch :class:`Group` whose generation starts at the prompt's
    last token, so each sample draws its first token from its own
    generator. Before, each of the n samples prefilled the whole prompt
    again (4 passes of EditScore: 4 prefills of the same prompts)."""
    firsts = [(i, st.rows[0]) for i, st in enumerate(work)]
    inputs = _prompt_inputs(be, reqs, firsts)
    for b, (i, _) in enumerate(firsts):
        work[i].prompt_tokens = int(inputs["attention_mask"][b].sum())
    prompt = _per_token(inputs)
    head = {k: v[:, :-1] if k in prompt else v for k, v in inputs.items()}
    if not any(hasattr(m, attr) for m in be.model.modules() for attr in _STEP_STATE):
        # positions as generate() gives a left-padded prompt (models with M-RoPE derive theirs from the mask)
        mask = head["attention_mask"].long()
        head["position_ids"] = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with be._lock:
        out = be.model(**head, use_cache=True, logits_to_keep=1)
        state = _model_state(be.model)
    name = next((k for k in ("cache", "past_key_values") if getattr(out, k, None) is not None), None)
    if name is None:
        raise RuntimeError("this model's forward returns no cache: its samples cannot share a prefill")
    cache = getattr(out, name)
    cache.batch_repeat_interleave(n)
    rows = [b for b in range(len(firsts)) for _ in range(n)]
    state = {k: v[rows] if torch.is_tensor(v) and v.dim() > 0 else v for k, v in state.items()}
    return Group(cache, {k: v[rows] for k, v in prompt.items()}, [(id(work[i]), row) for i, row in live], state,
                 cache_name=name)


def _text_lock(be: Any) -> Any:
    lock = getattr(be, "text_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


def _prompt_inputs(be: Any, reqs: Sequence[ChatRequest], live: list[tuple[int, Row]]) -> dict[str, Any]:
    with _text_lock(be):
        prompts = [be._prompt(r) for r in reqs]
        kwargs: dict[str, Any] = {"text": [prompts[i][0] for i, _ in live], "return_tensors": "pt", "padding": True}
        images = [prompts[i][1] for i, _ in live]
        if any(images):
            kwargs["images"] = images
        processed = dict(be.processor(**kwargs))
    inputs = {k: v.to(be.device) if torch.is_tensor(v) else v for k, v in processed.items()}
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(be.dtype)
    return inputs


def _per_token(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    ids = inputs["input_ids"]
    return {k: v for k, v in inputs.items() if torch.is_tensor(v) and v.shape == ids.shape}


def _resumed(be: Any, group: Group, keep: list[int], live: list[tuple[int, Row]]) -> dict[str, Any]:
    """Inputs that continue ``group`` for its rows ``keep``: prompt plus every
    token generated so far, and the cache of those rows (no image input:
    it is in the cache)."""
    done = {len(row.ids) for _, row in live}
    if len(done) != 1:  # rows of one batch run in step; anything else is a bug, not a state to guess from
        raise RuntimeError(f"rows of a paused batch have generated different lengths {sorted(done)}")
    generated = torch.tensor([row.ids for _, row in live], dtype=group.prompt["input_ids"].dtype,
                             device=group.prompt["input_ids"].device)
    rows = None if keep == list(range(len(group.members))) else keep
    cache = group.cache
    if rows is not None:
        cache.batch_select_indices(torch.tensor(rows, device=generated.device))
    out: dict[str, Any] = {}
    for k, v in group.prompt.items():
        v = v if rows is None else v[rows]
        if k == "input_ids":
            out[k] = torch.cat([v, generated], dim=1)
        else:  # attention mask: the generated tokens count; token types: text
            fill = torch.ones_like if k == "attention_mask" else torch.zeros_like
            out[k] = torch.cat([v, fill(generated, dtype=v.dtype)], dim=1)
    out[group.cache_name] = cache
    return out


#: per-token inputs a slice gets up to its end (as transformers' own chunked prefill gives them)
_TOKEN_TYPES = ("token_type_ids", "mm_token_type_ids", "moe_mm_token_type_ids")


def _slice_ends(length: int, chunk: int, image_cols: list[int], split_images: bool) -> list[int]:
    """Where the prefill slices run here end, for a prompt of ``length`` columns
    whose image tokens sit in ``image_cols``; empty when it is not sliced.
    The rest after the last end (1 to ``chunk`` columns, text only) is left to
    ``generate()``. Unless ``split_images``, no end falls inside the image tokens.

    >>> _slice_ends(10, 4, [], True)
    [4, 8]
    >>> _slice_ends(10, 4, [3, 4, 5], False)
    [6]
    >>> _slice_ends(10, 4, [8], True)
    [4, 8, 9]
    >>> _slice_ends(4, 4, [], True)
    []
    """
    if chunk < 1 or length <= chunk:
        return []
    first, last = (min(image_cols), max(image_cols)) if image_cols else (length, -1)
    ends: list[int] = []
    end = 0
    while length - end > chunk:
        end += chunk
        if not split_images and first < end <= last:
            end = last + 1  # the slice holding the first image token holds them all
        if end >= length:
            return []  # the image tokens reach the prompt's end: nothing left for generate()
        ends.append(end)
    if ends and ends[-1] <= last:  # generate() gets text only (its images are in the cache already)
        if last + 1 >= length:
            return []
        ends.append(last + 1)
    return ends


def _start_prefill(be: Any, work: list[Paused], inputs: dict[str, Any], live: list[tuple[int, Row]],
                   chunk: int | None) -> Group | None:
    """A :class:`Group` whose prompt will be encoded in slices of ``chunk``
    columns, or ``None`` when the prompt fits in one."""
    ids = inputs["input_ids"]
    if not chunk or ids.shape[1] <= chunk:
        return None
    model = _inner(be.model)
    image_token = getattr(model.config, "image_token_id", None)
    image_cols = [] if image_token is None else (ids == image_token).any(0).nonzero().flatten().tolist()
    if not hasattr(model, "_prepare_position_ids_for_generation"):
        return None  # a transformers without it: positions as generate() makes them are not known here
    per_token = _per_token(inputs)
    others = {k: v for k, v in inputs.items() if k not in per_token}
    with be._lock:
        positions = None
        if "position_ids" in _forward_parameters(model):
            # the whole prompt's positions (Qwen2-VL's 3D ones need all its images), as generate() computes them
            positions = model._prepare_position_ids_for_generation(ids, {k: v for k, v in inputs.items() if k != "input_ids"})
        features: dict[str, Any] = {}
        if image_cols and others and _pre_encodes(model):
            kwargs = dict(others)
            kwargs = model._prepare_multimodal_encoder_kwargs_for_generation(kwargs)
            features = kwargs.pop("mm_encoder_outputs", None) or {}
            others = kwargs  # what the encoder did not take
        state = _model_state(be.model)
    raw = {k: v for k, v in others.items() if k in _raw_multimodal_keys()}
    shared = {k: v for k, v in others.items() if k not in raw}
    ends = _slice_ends(int(ids.shape[1]), chunk, image_cols, split_images=not raw)
    if not ends:
        return None
    pre = Prefill(ends, positions, shared=shared, raw=raw)
    starts = [0, *ends[:-1]]
    pre.features = [{} for _ in ends]
    for modality, output in features.items():
        if output is None:
            continue
        mask = ids == getattr(model.config, f"{modality}_token_id")
        rows = mask.flatten().cumsum(0).view_as(mask) - 1  # feature row of each placeholder, in (batch, column) order
        for k, (a, b) in enumerate(zip(starts, ends)):
            if mask[:, a:b].any():
                pre.features[k][modality] = _slice_features(output, rows[:, a:b][mask[:, a:b]])
    if raw:
        pre.raw_at = next(k for k, b in enumerate(ends) if b > image_cols[0])
    prompt = dict(per_token)
    group = Group(None, prompt, [(id(work[i]), row) for i, row in live], state,
                  cache_name="cache" if "cache" in _forward_parameters(model) else "past_key_values",
                  prefill=pre)
    for i, _ in live:
        work[i].group = group
    return group


def _inner(model: Any) -> Any:
    """The transformers model itself: a PEFT wrapper's base model (its LoRA layers
    are in it), whose signatures and generation helpers are the model's own."""
    base = getattr(model, "get_base_model", None)
    return base() if callable(base) else model


def _forward_parameters(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _pre_encodes(model: Any) -> bool:
    """Whether transformers can encode this model's images ahead of its prefill
    (and hand each prefill slice the features of its own image tokens)."""
    try:
        from transformers.generation.utils import _slice_mm_encoder_output  # noqa: F401
    except ImportError:
        return False
    supports = getattr(model, "_supports_mm_encoder_outputs", None)
    return bool(supports and supports() and hasattr(model, "_prepare_multimodal_encoder_kwargs_for_generation"))


def _raw_multimodal_keys() -> tuple[str, ...]:
    keys: tuple[str, ...] = ("pixel_values", "pixel_attention_mask", "image_sizes", "image_grid_thw")
    try:
        from transformers.generation.utils import MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL
    except ImportError:
        return keys
    return tuple(MULTIMODAL_INPUTS_TO_DROP_OUTSIDE_PREFILL) + keys


def _slice_features(output: Any, rows: torch.Tensor) -> Any:
    from transformers.generation.utils import _slice_mm_encoder_output

    return _slice_mm_encoder_output(output, rows)  # type: ignore[arg-type]


def _prefill_slices(be: Any, work: list[Paused], group: Group, control: Control) -> bool:
    """Encode ``group``'s prompt a slice at a time until the slices run here are
    done (then ``group.prefill`` is ``None``: ``generate()`` does the rest) or the
    scheduler asks for the model (``control.pause``, asked after every slice, the
    last one too) or every client left. Returns whether generation may go on now."""
    pre = group.prefill
    assert pre is not None
    model = _inner(be.model)
    prompt = group.prompt
    total = int(prompt["input_ids"].shape[1])
    owners = {id(st): i for i, st in enumerate(work)}
    keep_logits = "logits_to_keep" in _forward_parameters(model)
    while pre.done < len(pre.ends):
        a, b = pre.encoded, pre.ends[pre.done]
        kwargs: dict[str, Any] = dict(pre.shared)
        if pre.raw and pre.done == pre.raw_at:
            kwargs.update(pre.raw)
        kwargs["attention_mask"] = prompt["attention_mask"][:, :b]
        if pre.positions is not None:
            kwargs["position_ids"] = pre.positions[..., a:b]
        for key in _TOKEN_TYPES:
            if key in prompt:
                kwargs[key] = prompt[key][..., :b]
        if group.cache is not None:
            kwargs[group.cache_name] = group.cache
        with be._lock:
            be.calls += 1
            _restore(be.model, group.model_state, None)
            model_inputs = model.prepare_inputs_for_generation(prompt["input_ids"][:, a:b], is_first_iteration=True,
                                                               use_cache=True, **kwargs)
            if pre.features[pre.done]:
                model_inputs["mm_encoder_outputs"] = pre.features[pre.done]
            if keep_logits:
                model_inputs["logits_to_keep"] = 1  # only the cache is wanted: no logits for every token
            out = model(**model_inputs, return_dict=True)
            group.model_state = _model_state(be.model)
        cache = next((getattr(out, n) for n in ("cache", "past_key_values") if getattr(out, n, None) is not None),
                     None)
        if cache is None:
            raise RuntimeError("this model's forward returns no cache: its prompts cannot be prefilled in slices")
        group.cache = cache
        pre.done += 1
        if control.on_prefill is not None:
            for owner in dict.fromkeys(o for o, _ in group.members):
                if owner in owners:
                    control.on_prefill(owners[owner], b, total)
        if pre.done == len(pre.ends):
            group.prefill = None  # generate() encodes the rest and generates
        gone = control.cancelled() if control.cancelled else None
        if gone is not None:
            for owner, row in group.members:
                if owner in owners and gone[owners[owner]] and row.finish is None:
                    row.finish = "cancelled"
            if all(row.finish is not None for _, row in group.members):
                return False
        if control.pause and control.pause():
            return False
    return True


def _generation(be: Any, st: Paused, n: int) -> Generation:
    usage = {"prompt_tokens": st.prompt_tokens or 0, "completion_tokens": st.generated}
    if any(row.finish == "cancelled" for row in st.rows):
        return Generation(None, error=CANCELLED, usage=usage)
    with _text_lock(be):
        answers = [be.tokenizer.decode(row.ids, skip_special_tokens=True) for row in st.rows]
    finish = "stop" if any(row.finish == "stop" for row in st.rows) else "length"
    first = st.rows[0]
    return Generation(answers[0], first.steps, finish, samples=answers if n > 1 else [], usage=usage)


@dataclass(eq=False)
class _Slice:
    """What one ``generate()`` call of :func:`_run_slice` shares with its hooks
    (the sampler, the penalty, the stopping check): the live rows and why each
    stopped in this slice."""

    be: Any
    live: list[tuple[int, Row]]
    settings: Any
    control: Control
    start: int  # input column where this slice's new tokens begin
    eos: set[int]
    stopped_at: dict[int, int] = field(default_factory=dict)  # row -> tokens of this slice that count, when stopped here
    ended: set[int] = field(default_factory=set)
    cancelled_rows: set[int] = field(default_factory=set)
    paused: bool = False
    captured: list[torch.Tensor] = field(default_factory=list)  # scores after the penalties (SGLang's log-probs)

    @property
    def streaming(self) -> bool:
        return self.control.on_text is not None

    def stream(self, i: int, row: Row, new: list[int], final: bool = False) -> None:
        """Sends row ``row`` of request ``i`` the text it gained from ``new`` tokens."""
        with _text_lock(self.be):
            text = self.be.tokenizer.decode(row.ids + new, skip_special_tokens=True)
        if not final:
            text = text.rstrip("\ufffd")  # half a character: wait for the rest of its bytes
        if text.startswith(row.text) and len(text) > len(row.text):
            delta, row.text = text[len(row.text):], text
            self.control.on_text(i, row.k, delta)  # type: ignore[misc]


class _Sampler:
    """A logits processor: each sampled row draws from its own generator; the
    drawn token is then the only choice left, so greedy decoding picks it. The
    rows of a step are drawn in one vectorised call (a per-row loop sorted the
    whole vocabulary once per row and step: ~9 ms each for a 152k-token
    vocabulary on a CPU, which grew with the batch and was most of a batched
    sampled step's cost beside the model)."""

    def __init__(self, sl: _Slice, top_k: int, top_p: float) -> None:
        self.sl, self.top_k, self.top_p = sl, top_k, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        sl = self.sl
        rows = [b for b, (_, row) in enumerate(sl.live) if row.rng is not None and b not in sl.ended
                and b not in sl.stopped_at]
        if not rows:
            return scores
        picked = sample_tokens(scores[rows], sl.settings.temperature, self.top_k, self.top_p,
                               [sl.live[b][1].rng for b in rows])  # type: ignore[misc]
        at = torch.tensor(rows, device=scores.device)
        scores[at] = -float("inf")
        scores[at, picked] = 0.0
        return scores


class _GeneratedPenalty:
    """A logits processor: the repetition penalty over the tokens generated so far only (not the prompt's)."""

    def __init__(self, sl: _Slice, penalty: float) -> None:
        self.sl, self.penalty = sl, penalty

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for b, (_, row) in enumerate(self.sl.live):
            seen = sorted(set(row.ids + input_ids[b, self.sl.start:].tolist()))
            if seen:
                at = torch.tensor(seen, device=scores.device)
                vals = scores[b, at]
                scores[b, at] = torch.where(vals < 0, vals * self.penalty, vals / self.penalty)
        return scores


class _Capture:
    """A logits processor: the scores after the penalties, before sampling: the log-probabilities SGLang reports."""

    def __init__(self, sl: _Slice) -> None:
        self.sl = sl

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.sl.captured.append(scores.detach().clone())
        return scores


class _Steer:
    """The stopping criterion: after every token, which rows end (end of turn,
    their token budget, their client gone, or the caller asking to pause),
    streaming each live row's new text."""

    def __init__(self, sl: _Slice) -> None:
        self.sl = sl

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        sl, control = self.sl, self.sl.control
        step = input_ids.shape[1] - sl.start
        last = input_ids[:, -1].tolist()
        pause = bool(control.pause and control.pause())
        gone = control.cancelled() if control.cancelled else None
        done = []
        for b, (i, row) in enumerate(sl.live):
            if b in sl.ended or b in sl.stopped_at:
                done.append(True)
                continue
            if last[b] in sl.eos:
                sl.ended.add(b)
                done.append(True)
                if sl.streaming:
                    sl.stream(i, row, input_ids[b, sl.start:-1].tolist())
                continue
            reason = None
            if len(row.ids) + step >= sl.settings.max_new_tokens:
                reason = "length"
            elif gone is not None and gone[i]:
                reason = "cancelled"
                sl.cancelled_rows.add(b)
            elif pause:
                reason = "pause"
                sl.paused = True
            if reason is not None:
                sl.stopped_at[b] = step
            if sl.streaming and reason != "cancelled":
                sl.stream(i, row, input_ids[b, sl.start:].tolist())
            done.append(reason is not None)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _slice_inputs(be: Any, inputs: dict[str, Any] | None, resume: tuple[Group, list[int]] | None,
                  live: list[tuple[int, Row]]) -> tuple[dict[str, Any], dict[str, torch.Tensor], list[int] | None]:
    """The model inputs of a slice, its per-token prompt and (resuming part of a
    paused batch) the batch rows kept; ``None``: every row."""
    if resume is None:
        assert inputs is not None
        return inputs, _per_token(inputs), None
    group, keep = resume
    rows = None if keep == list(range(len(group.members))) else keep
    prompt = {k: v if rows is None else v[rows] for k, v in group.prompt.items()}
    return _resumed(be, group, keep, live), prompt, rows


def _end_tokens(be: Any) -> set[int]:
    import numpy as np

    eos = set(np.atleast_1d(be.model.generation_config.eos_token_id or []).tolist()) | {be.tokenizer.pad_token_id}
    # Idefics3 ends a turn with <end_of_utterance>, which its generation config may not list
    eos |= {be.tokenizer.get_vocab().get("<end_of_utterance>")} - {None}
    return eos


def _processors(sl: _Slice, want_steps: bool) -> tuple[list[Any], bool, bool]:
    """The slice's logits processors, whether the repetition penalty is ours
    (not generate()'s) and whether log-probabilities are read after the penalties."""
    be, settings = sl.be, sl.settings
    # extra sampling settings a backend may carry (EditScore's release samples with top-p and top-k)
    extra = getattr(be, "sampling", None) or {}
    top_k, top_p = int(extra.get("top_k") or 0), float(extra.get("top_p") or 1.0)
    if settings.top_k or settings.top_p < 1.0:  # asked for by the request (engine clients send them as fields)
        top_k, top_p = settings.top_k, settings.top_p
    # an engine imitation's quirks (editlens serve --imitate): SGLang penalises generated tokens only and
    # returns log-probabilities after the penalties
    quirks = getattr(be, "engine_quirks", None) or {}
    penalty = settings.repetition_penalty
    own_penalty = quirks.get("penalty") == "generated" and penalty != 1.0
    after_penalties = quirks.get("logprobs") == "after-penalties"
    sampled = any(row.rng is not None for _, row in sl.live)
    processors: list[Any] = ([_GeneratedPenalty(sl, penalty)] if own_penalty else []) + \
        ([_Capture(sl)] if after_penalties and want_steps else []) + ([_Sampler(sl, top_k, top_p)] if sampled else [])
    return processors, own_penalty, after_penalties


def _generate_slice(sl: _Slice, inputs: dict[str, Any], processors: list[Any], own_penalty: bool,
                    want_steps: bool, resume: tuple[Group, list[int]] | None,
                    rows: list[int] | None) -> tuple[Any, dict[str, Any]]:
    """Runs ``generate()`` for the slice (restoring a paused batch's model state first);
    returns its output and the model state to keep."""
    from transformers import LogitsProcessorList, StoppingCriteriaList

    be, settings = sl.be, sl.settings
    penalty = settings.repetition_penalty
    max_new = max(1, max(settings.max_new_tokens - len(row.ids) for _, row in sl.live))
    with be._lock:
        be.calls += 1
        if resume is not None:
            _restore(be.model, resume[0].model_state, rows)
        gen = be.model.generate(
            **inputs, max_new_tokens=max_new, do_sample=False, temperature=None, top_p=None, top_k=None,
            logits_processor=LogitsProcessorList(processors) if processors else None,
            stopping_criteria=StoppingCriteriaList([_Steer(sl)]), return_dict_in_generate=True,
            output_logits=want_steps, pad_token_id=be.tokenizer.pad_token_id,
            repetition_penalty=penalty if penalty != 1.0 and not own_penalty else None,
        )
        return gen, _model_state(be.model)


def _take_tokens(sl: _Slice, gen: Any, candidates: tuple[str, ...], want_steps: bool, after_penalties: bool,
                 asked: Sequence[tuple[int, ...]]) -> None:
    """Adds each row's tokens of this slice (up to its end of turn or its stop)
    and its log-probabilities, and marks the rows that finished and why."""
    be, settings = sl.be, sl.settings
    new = gen.sequences[:, sl.start:].tolist()
    for b, (i, row) in enumerate(sl.live):
        ids = new[b]
        limit = sl.stopped_at.get(b, len(ids))
        cut = next((j for j, t in enumerate(ids[:limit]) if t in sl.eos), None)
        got = ids[: limit if cut is None else cut]
        if row.steps is not None and want_steps:
            with _text_lock(be):
                row.steps += be._steps(tuple(sl.captured) if after_penalties else gen.logits, b, got, candidates,
                                       settings.top_logprobs,
                                       asked[i] if i < len(asked) else ())
        row.ids += got
        if cut is not None:
            row.finish = "stop"
        elif len(row.ids) >= settings.max_new_tokens:
            row.finish = "length"
        elif b in sl.cancelled_rows:
            row.finish = "cancelled"
        elif not sl.paused:
            row.finish = "length"  # generate() ended without a reason of ours: nothing more was asked
        if sl.streaming and row.finish in ("stop", "length"):
            sl.stream(i, row, [], final=True)  # what was held back (a last half character)


def _keep_unfinished(gen: Any, prompt: dict[str, torch.Tensor], work: list[Paused], live: list[tuple[int, Row]],
                     state: dict[str, Any]) -> None:
    """Rows not finished keep the slice's cache in one :class:`Group`, to go on later."""
    if all(row.finish is not None for _, row in live):
        return
    name = next((n for n in ("cache", "past_key_values") if getattr(gen, n, None) is not None), None)
    if name is None:
        raise RuntimeError("this model's generate() returns no cache: its answers cannot be paused")
    group = Group(getattr(gen, name), prompt, [(id(work[i]), row) for i, row in live], state, cache_name=name)
    for i, _ in live:
        work[i].group = group


def _run_slice(be: Any, work: list[Paused], inputs: dict[str, Any] | None, resume: tuple[Group, list[int]] | None,
               live: list[tuple[int, Row]], settings: Any, candidates: tuple[str, ...], want_steps: bool,
               control: Control, asked: Sequence[tuple[int, ...]] = ()) -> None:
    """One ``generate()`` call over the ``live`` rows: new tokens until each row ends
    or the caller pauses; unfinished rows keep their cache for the next slice."""
    inputs, prompt, rows = _slice_inputs(be, inputs, resume, live)
    sl = _Slice(be, live, settings, control, start=inputs["input_ids"].shape[1], eos=_end_tokens(be))
    processors, own_penalty, after_penalties = _processors(sl, want_steps)
    gen, state = _generate_slice(sl, inputs, processors, own_penalty, want_steps, resume, rows)
    _take_tokens(sl, gen, candidates, want_steps, after_penalties, asked)
    _keep_unfinished(gen, prompt, work, live, state)


def sample_tokens(logits: torch.Tensor, temperature: float, top_k: int, top_p: float,
                  generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One token per row of ``logits`` (rows x vocabulary), row ``i`` drawn
    with ``generators[i]`` alone (one uniform number per draw, so a row's
    draw does not depend on the other rows) from the softmax at
    ``temperature`` kept to its ``top_k`` most likely tokens (tokens tied
    with the k-th stay in) and then to the smallest set whose mass reaches
    ``top_p``, as transformers' top-k/top-p warpers do; 0 / 1.0 switch
    either off.

    >>> g = torch.Generator().manual_seed(0)
    >>> sample_tokens(torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]]), 1.0, 1, 1.0, [g, g]).tolist()
    [1, 0]
    >>> sample_tokens(torch.tensor([[0.0, 3.0, 1.0]]), 1.0, 0, 0.5, [g]).tolist()
    [1]
    """
    scaled = logits.float() / temperature
    if top_k and top_k < scaled.shape[-1]:
        cut = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        width = int((scaled >= cut).sum(-1).max())
        vals, ids = torch.topk(scaled, width, dim=-1)  # descending
        vals = vals.masked_fill(vals < cut, -float("inf"))
    else:
        vals, ids = torch.sort(scaled, dim=-1, descending=True)
    probs = torch.softmax(vals, dim=-1)
    if top_p < 1.0:
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        probs = probs.masked_fill(before >= top_p, 0.0)
    cdf = probs.cumsum(-1)
    if not bool(torch.isfinite(cdf[:, -1]).all()):  # no finite logit left: fail the batch, never invent a token
        raise ValueError("sampling: a row's logits hold no finite value to draw from")
    u = torch.cat([torch.rand(1, generator=g, device=g.device) for g in generators]).to(cdf.device)
    at = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).clamp_max(cdf.shape[-1] - 1)
    return ids.gather(-1, at).squeeze(-1)
