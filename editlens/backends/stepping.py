"""Local generation that can stop between two tokens and go on later.

``editlens serve`` shares one model between many clients. Run to the end, a
2,000-token answer would hold every other client for its whole length, so
the server's scheduler (:class:`~editlens.backends.server.Batcher`) asks for
generation in slices: :func:`generate_some` generates until each answer is
done *or* the scheduler says to yield (``Control.pause``, checked after
every generated token). An answer that yielded comes back as
:class:`Paused`, holding the tokens generated so far; passed back in, its
prompt and those tokens are encoded again (one prefill) and generation goes
on where it stopped. Greedy answers are the same as uninterrupted ones.

Sampling draws each answer's tokens from its own seeded generator (sample k
of a request with seed s: a hash of ``(s, k)``), so a seeded answer does not
depend on what else shares its batch, nor on where it was paused.

Each answer also stops on its own (``Control.cancelled``) when its client is
gone, and streaming clients get its text as it grows (``Control.on_text``).
"""

from __future__ import annotations

import hashlib
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


@dataclass
class Paused:
    """A request whose answers are partly generated; pass it back to go on."""

    rows: list[Row]
    prompt_tokens: int | None = None

    @property
    def generated(self) -> int:
        return sum(len(r.ids) for r in self.rows)


@dataclass
class Control:
    """How a caller steers :func:`generate_some` while it runs.

    ``pause()``: yield the whole batch now (checked after every token).
    ``cancelled()``: per request, whether its client is gone (its answers stop).
    ``on_text(request index, k, new text)``: streamed text of answer ``k``.
    """

    pause: Callable[[], bool] | None = None
    cancelled: Callable[[], Sequence[bool]] | None = None
    on_text: Callable[[int, int, str], None] | None = None


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


_PLACEHOLDERS = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id",
                 "vision_end_token_id", "vision_token_id")


def placeholder_ids(be: Any) -> set[int]:
    """Token ids that stand for images in a prompt. A random (or confused) model
    can generate them; encoded again after a pause they would be taken for
    images, so an answer holding one is never paused."""
    if not hasattr(be, "_placeholder_ids"):
        ids: set[int] = set()
        cfg = be.model.config
        for c in (cfg, getattr(cfg, "text_config", None), getattr(cfg, "vision_config", None)):
            for name in _PLACEHOLDERS:
                v = getattr(c, name, None) if c is not None else None
                if isinstance(v, int):
                    ids.add(v)
        ids.update(getattr(be.tokenizer, "additional_special_tokens_ids", None) or [])
        be._placeholder_ids = ids
    return be._placeholder_ids


def _with_prefixes(inputs: dict[str, Any], prefixes: list[list[int]], pad_id: int) -> dict[str, Any]:
    """``inputs`` with each row's generated tokens appended after its prompt,
    left-padded again (per-token tensors grow; image tensors are unchanged)."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    per_token = [k for k, v in inputs.items() if torch.is_tensor(v) and v.shape == ids.shape and k != "input_ids"]
    rows = []
    for b, prefix in enumerate(prefixes):
        keep = mask[b].bool()
        extra = torch.tensor(prefix, dtype=ids.dtype)
        row = {"input_ids": torch.cat([ids[b][keep], extra])}
        for k in per_token:  # attention mask: 1 for the new tokens; token types: 0 (text)
            fill = torch.ones if k == "attention_mask" else torch.zeros
            row[k] = torch.cat([inputs[k][b][keep], fill(len(prefix), dtype=inputs[k].dtype)])
        rows.append(row)
    width = max(len(r["input_ids"]) for r in rows)
    out = dict(inputs)
    for k in ["input_ids", *per_token]:
        pad = pad_id if k == "input_ids" else 0
        out[k] = torch.stack([torch.cat([torch.full((width - len(r[k]),), pad, dtype=r[k].dtype), r[k]])
                              for r in rows])
    return out


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
    from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

    control = control or Control()
    settings, candidates = reqs[0].settings, reqs[0].candidates
    want_steps = bool(candidates) or settings.top_logprobs > 0
    work = [s if s is not None else _fresh(r, want_steps, be.device) for r, s in zip(reqs, states)]
    live = [(i, row) for i, st in enumerate(work) for row in st.rows if row.finish is None]
    if live:
        prompts = [be._prompt(r) for r in reqs]
        texts = [prompts[i][0] for i, _ in live]
        images = [prompts[i][1] for i, _ in live]
        kwargs: dict[str, Any] = {"text": texts, "return_tensors": "pt", "padding": True}
        if any(images):
            kwargs["images"] = images
        inputs = dict(be.processor(**kwargs))
        for b, (i, _) in enumerate(live):
            if work[i].prompt_tokens is None:
                work[i].prompt_tokens = int(inputs["attention_mask"][b].sum())
        if any(row.ids for _, row in live):
            inputs = _with_prefixes(inputs, [row.ids for _, row in live], be.tokenizer.pad_token_id)
        inputs = {k: v.to(be.device) if torch.is_tensor(v) else v for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(be.dtype)
        _run_slice(be, inputs, live, settings, candidates, want_steps, control,
                   LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList)
    out: list[Generation | Paused] = []
    for st in work:
        if any(row.finish is None for row in st.rows):
            out.append(st)
            continue
        out.append(_generation(be, st, settings.n))
    return out


def _generation(be: Any, st: Paused, n: int) -> Generation:
    usage = {"prompt_tokens": st.prompt_tokens or 0, "completion_tokens": st.generated}
    if any(row.finish == "cancelled" for row in st.rows):
        return Generation(None, error=CANCELLED, usage=usage)
    answers = [be.tokenizer.decode(row.ids, skip_special_tokens=True) for row in st.rows]
    finish = "stop" if any(row.finish == "stop" for row in st.rows) else "length"
    first = st.rows[0]
    return Generation(answers[0], first.steps, finish, samples=answers if n > 1 else [], usage=usage)


def _run_slice(be: Any, inputs: dict[str, Any], live: list[tuple[int, Row]], settings: Any,
               candidates: tuple[str, ...], want_steps: bool, control: Control,
               LogitsProcessor: Any, LogitsProcessorList: Any, StoppingCriteria: Any,
               StoppingCriteriaList: Any) -> None:
    import numpy as np

    start = inputs["input_ids"].shape[1]
    eos = set(np.atleast_1d(be.model.generation_config.eos_token_id or []).tolist()) | {be.tokenizer.pad_token_id}
    stopped_at: dict[int, int] = {}  # row -> tokens of this slice that count, when stopped here
    special = placeholder_ids(be)
    unpausable = [any(t in special for t in row.ids) for _, row in live]
    ended: set[int] = set()
    cancelled_rows: set[int] = set()
    paused = [False]
    streaming = control.on_text is not None

    class Sampler(LogitsProcessor):
        """Each sampled row draws from its own generator; the drawn token is
        then the only choice left, so greedy decoding picks it."""

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            for b, (_, row) in enumerate(live):
                if row.rng is None or b in ended or b in stopped_at:
                    continue
                probs = torch.softmax(scores[b].float() / settings.temperature, dim=-1)
                tok = torch.multinomial(probs, 1, generator=row.rng)
                scores[b].fill_(-float("inf"))
                scores[b, tok] = 0.0
            return scores

    def stream(b: int, i: int, row: Row, new: list[int], final: bool = False) -> None:
        text = be.tokenizer.decode(row.ids + new, skip_special_tokens=True)
        if not final:
            text = text.rstrip("\ufffd")  # half a character: wait for the rest of its bytes
        if text.startswith(row.text) and len(text) > len(row.text):
            delta, row.text = text[len(row.text):], text
            control.on_text(i, row.k, delta)  # type: ignore[misc]

    class Steer(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            step = input_ids.shape[1] - start
            last = input_ids[:, -1].tolist()
            for b, t in enumerate(last):
                if t in special and b not in ended and b not in stopped_at:
                    unpausable[b] = True
            pause = bool(control.pause) and not any(unpausable) and bool(control.pause())  # type: ignore[misc]
            gone = control.cancelled() if control.cancelled else None
            done = []
            for b, (i, row) in enumerate(live):
                if b in ended or b in stopped_at:
                    done.append(True)
                    continue
                if last[b] in eos:
                    ended.add(b)
                    done.append(True)
                    if streaming:
                        stream(b, i, row, input_ids[b, start:-1].tolist())
                    continue
                reason = None
                if len(row.ids) + step >= settings.max_new_tokens:
                    reason = "length"
                elif gone is not None and gone[i]:
                    reason = "cancelled"
                    cancelled_rows.add(b)
                elif pause:
                    reason = "pause"
                    paused[0] = True
                if reason is not None:
                    stopped_at[b] = step
                if streaming and reason != "cancelled":
                    stream(b, i, row, input_ids[b, start:].tolist())
                done.append(reason is not None)
            return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    sampled = any(row.rng is not None for _, row in live)
    max_new = max(1, max(settings.max_new_tokens - len(row.ids) for _, row in live))
    with be._lock:
        be.calls += 1
        gen = be.model.generate(
            **inputs, max_new_tokens=max_new, do_sample=False, temperature=None, top_p=None, top_k=None,
            logits_processor=LogitsProcessorList([Sampler()]) if sampled else None,
            stopping_criteria=StoppingCriteriaList([Steer()]), return_dict_in_generate=True,
            output_logits=want_steps, pad_token_id=be.tokenizer.pad_token_id,
        )
    new = gen.sequences[:, start:].tolist()
    for b, (i, row) in enumerate(live):
        ids = new[b]
        limit = stopped_at.get(b, len(ids))
        cut = next((j for j, t in enumerate(ids[:limit]) if t in eos), None)
        got = ids[: limit if cut is None else cut]
        if row.steps is not None and want_steps:
            row.steps += be._steps(gen.logits, b, got, candidates, settings.top_logprobs)
        row.ids += got
        if cut is not None:
            row.finish = "stop"
        elif len(row.ids) >= settings.max_new_tokens:
            row.finish = "length"
        elif b in cancelled_rows:
            row.finish = "cancelled"
        elif not paused[0]:
            row.finish = "length"  # generate() ended without a reason of ours: nothing more was asked
        if streaming and row.finish in ("stop", "length"):
            stream(b, i, row, [], final=True)  # what was held back (a last half character)
