"""The scheduler of ``editlens serve``: many clients, one model, nobody stalled.

Requests wait in one queue; a single thread runs them on the model in
batches (up to ``max_batch`` requests with the same settings and prompts of
similar length, gathered for at most ``window_ms``). What runs next, and
when a running batch must make room, follows one rule, *least attained
service first*:

* every request counts the seconds of generation it has had (its service);
  the waiting request with the least service goes first, the one with fewer
  tokens left to generate among equals (a new short request before a new
  long one);
* a running batch yields, between two generated tokens, to a waiting
  request that has had less service and has fewer tokens left: the long
  answer pauses (:mod:`editlens.backends.stepping` keeps its model cache, so
  nothing is computed twice), the short one runs, and the paused batch goes
  on where it stopped, as the same batch. A batch runs at least ``slice_ms``
  (and one token) before it yields;
* no request starves: one that has waited longer than twice its service
  (and at least ``starve_s``) goes before every request that has not;
* a long prompt is encoded (prefilled) in slices of at most
  ``prefill_tokens`` tokens, and a batch may yield between two slices as
  between two tokens: a 200,000-token prompt does not hold the model for
  its whole prefill. Work left is counted in generated tokens, a prompt's
  tokens still to prefill at ``PREFILL_TOKENS_PER_STEP`` (64) a token.

Backends that cannot pause (HTTP, scripted test backends) run each batch to
the end. Every request also stops on its own, at the next token, once its
client is gone or its deadline has passed; closing the scheduler stops the
batch in flight at its next token and answers everything with 503.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Callable

from editlens.backends.cancel import cancel_scope, make_cancellable
from editlens.backends.types import ChatRequest, Generation

SHUTTING_DOWN = "the server is shutting down"
DEADLINE = "no answer within the server's deadline"
GONE = "the client went away"


def default_prefill_tokens(device: Any) -> int:
    """The prefill slice ``editlens serve`` uses unless told: 2048 tokens on a
    GPU (a fraction of a second for a few-billion-parameter model), 512 on a
    CPU, where 2048 tokens of such a model take seconds.

    >>> default_prefill_tokens("cuda:0"), default_prefill_tokens("cpu")
    (2048, 512)
    """
    return 2048 if str(device).startswith("cuda") else 512


#: prompt tokens whose prefill counts as much work as one generated token. A decode step reads every
#: weight for one token a row, a prefill reads them once for many: one step costs about as much as
#: prefilling a few hundred tokens on a GPU, a few dozen on a CPU; the lower figure keeps a long
#: prefill from passing for short work.
PREFILL_TOKENS_PER_STEP = 64


@dataclass(eq=False)
class Job:
    """One request in the scheduler."""

    req: ChatRequest
    fut: Future
    deadline: float
    seq: int
    prompt_tokens: int | None = None
    on_text: Callable[[int, str], None] | None = None  # streaming: (sample k, new text)
    state: Any = None  # what a paused generation has produced so far
    service: float = 0.0  # seconds of generation received
    queued: float = field(default_factory=time.monotonic)  # when it last joined the queue
    gone: bool = False
    prefill_tokens: int | None = None  # the scheduler's prefill slice (tokens)

    @property
    def abandoned(self) -> bool:
        return self.gone or self.fut.done() or time.monotonic() > self.deadline

    @property
    def remaining(self) -> int:
        """Work left, in generated tokens: tokens to generate (per answer), plus,
        where prompts are prefilled in slices, its prompt tokens not encoded yet
        at :data:`PREFILL_TOKENS_PER_STEP` a token."""
        done = 0 if self.state is None else max((len(r.ids) for r in self.state.rows), default=0)
        tokens = max(0, self.req.settings.max_new_tokens - done)
        if not self.prefill_tokens:
            return tokens
        left = (self.prompt_tokens or 0) if self.state is None else int(getattr(self.state, "prefill_left", 0))
        return tokens + -(-left // PREFILL_TOKENS_PER_STEP)

    def cancel(self) -> None:
        """The client is gone: stop at the next token, answer nobody."""
        self.gone = True


def _resolve(fut: Future, gen: Generation) -> None:
    try:
        fut.set_result(gen)
    except InvalidStateError:  # the client gave up (deadline) meanwhile
        pass


class Batcher:
    """Runs requests from many clients on one backend (see the module docstring)."""

    def __init__(self, backend: Any, max_batch: int = 8, window_ms: float = 10.0, slice_ms: float = 20.0,
                 starve_s: float = 2.0, prefill_tokens: int | None = 2048) -> None:
        self.backend = backend
        self.max_batch = max(1, max_batch)
        self.window = window_ms / 1000.0
        self.slice = slice_ms / 1000.0
        self.starve = starve_s
        self.pausable = callable(getattr(backend, "generate_some", None))
        self._cv = threading.Condition()
        self._pending: list[Job] = []
        self._running: list[Job] = []
        self._closed = False
        self._seq = 0
        self._slice_start = 0.0
        self.prefill_tokens = prefill_tokens if prefill_tokens and prefill_tokens > 0 else None
        self.preemptions = 0  # batches that yielded to a waiting request (tests, benchmarks)
        # what happened, in order (tests, benchmarks): ("prefill", seq, tokens encoded, prompt tokens) after each
        # prefill slice, ("done", seq) when a request is answered
        self.events: deque[tuple] = deque(maxlen=10_000)
        make_cancellable(backend)
        self.thread = threading.Thread(target=self._loop, daemon=True, name="editlens-batcher")
        self.thread.start()

    # -- clients ------------------------------------------------------------------------
    def enqueue(self, req: ChatRequest, timeout: float = 300.0, prompt_tokens: int | None = None,
                on_text: Callable[[int, str], None] | None = None) -> Job:
        fut: Future = Future()
        with self._cv:
            self._seq += 1
            job = Job(req, fut, time.monotonic() + timeout, self._seq, prompt_tokens, on_text,
                      prefill_tokens=self.prefill_tokens)
            if self._closed:
                fut.set_result(Generation(None, error=SHUTTING_DOWN))
                return job
            self._pending.append(job)
            self._cv.notify_all()
        return job

    def submit(self, req: ChatRequest, timeout: float = 300.0) -> Future:
        return self.enqueue(req, timeout).fut

    def close(self) -> None:
        """Stop: the generation in flight ends at its next token; waiting requests get 503."""
        with self._cv:
            self._closed = True
            pending, self._pending = self._pending, []
            self._cv.notify_all()
        for job in pending:
            _resolve(job.fut, Generation(None, error=SHUTTING_DOWN))

    # -- policy ---------------------------------------------------------------------------
    def _key(self, job: Job, now: float, running: bool = False) -> tuple:
        service = job.service + (now - self._slice_start if running else 0.0)
        waited = 0.0 if running else now - job.queued
        starving = not running and waited >= max(self.starve, 2 * service)
        return (0 if starving else 1, max(0.0, service - waited), job.remaining, job.seq)

    def _should_pause(self) -> bool:
        """Called by the backend after every generated token of the running batch."""
        # let the HTTP side run (a small model's generation loop is mostly Python and holds the GIL):
        # requests are read, counted and queued while the batch generates, not only between batches
        time.sleep(0)
        now = time.monotonic()
        if self._closed:
            return True
        if now - self._slice_start < self.slice:
            return False
        with self._cv:
            running = [j for j in self._running if not j.abandoned]
            if not running:
                return False
            top = min(self._key(j, now, running=True) for j in running)
            left = max(j.remaining for j in running)
            for j in self._pending:
                if j.abandoned:
                    continue
                k = self._key(j, now)
                if k[0] == 0 or (k[1] < top[1] and j.remaining < left):
                    self.preemptions += 1
                    return True
        return False

    def _should_stop(self) -> bool:
        """For backends that cannot pause: stop once nobody waits for the batch."""
        running = self._running
        return bool(running) and (self._closed or all(j.abandoned for j in running))

    def _compatible(self, first: Job, job: Job) -> bool:
        if (job.req.settings, job.req.candidates) != (first.req.settings, first.req.candidates):
            return False
        a, b = first.prompt_tokens, job.prompt_tokens
        # a short prompt padded to a long one costs the long one's time: keep lengths within 4x
        return a is None or b is None or max(a, b) <= 4 * max(1, min(a, b))

    def _take(self) -> list[Job] | None:
        with self._cv:
            while not self._pending and not self._closed:
                self._cv.wait()
            if self._closed:
                return None
            end = time.monotonic() + self.window
            while len(self._pending) < self.max_batch and not self._closed:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            if self._closed:
                return None
            dropped = [j for j in self._pending if j.abandoned]
            self._pending = [j for j in self._pending if not j.abandoned]
            for j in dropped:
                _resolve(j.fut, Generation(None, error=GONE if j.gone else DEADLINE))
            if not self._pending:
                return []
            now = time.monotonic()
            ranked = sorted(self._pending, key=lambda j: self._key(j, now))
            first = ranked[0]
            group = getattr(first.state, "group", None)
            if group is not None:  # a paused batch goes on as itself (its cache holds exactly its rows)
                batch = [j for j in ranked if getattr(j.state, "group", None) is group]
            else:
                batch = [j for j in ranked if j.state is None and self._compatible(first, j)][: self.max_batch]
            taken = {id(j) for j in batch}
            self._pending = [j for j in self._pending if id(j) not in taken]
            self._running = batch
            self._slice_start = time.monotonic()
            return batch

    # -- the model thread -------------------------------------------------------------------
    def _run(self, batch: list[Job]) -> list[Any]:
        reqs = [j.req for j in batch]
        if not self.pausable:
            with cancel_scope(self._should_stop):
                return list(self.backend.generate(reqs))
        from editlens.backends.stepping import Control

        def on_text(i: int, k: int, delta: str) -> None:
            cb = batch[i].on_text
            if cb is not None and not batch[i].abandoned:
                cb(k, delta)

        # closing stops every answer for good (a pause could be refused: see stepping.placeholder_ids)
        def on_prefill(i: int, encoded: int, total: int) -> None:
            self.events.append(("prefill", batch[i].seq, encoded, total))

        control = Control(pause=self._should_pause, cancelled=lambda: [self._closed or j.abandoned for j in batch],
                          on_text=on_text if any(j.on_text for j in batch) else None,
                          prefill_tokens=self.prefill_tokens, on_prefill=on_prefill,
                          prompt_tokens=[j.prompt_tokens for j in batch])
        return list(self.backend.generate_some(reqs, [j.state for j in batch], control))

    def _run_isolated(self, batch: list[Job]) -> list[Any]:
        """``_run``; when a new batch raises, each request again on its own, so
        one request the model cannot take fails alone (a paused batch shares
        one cache and fails together)."""
        try:
            return self._run(batch)
        except Exception as exc:
            if len(batch) == 1 or any(j.state is not None for j in batch):
                return [Generation(None, error=f"{type(exc).__name__}: {exc}") for _ in batch]
        outs: list[Any] = []
        for job in batch:
            try:
                outs.extend(self._run([job]))
            except Exception as exc:
                outs.append(Generation(None, error=f"{type(exc).__name__}: {exc}"))
        return outs

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                continue
            t0 = time.monotonic()
            outs = self._run_isolated(batch)
            now, closed = time.monotonic(), self._closed
            back = []
            for job, out in zip(batch, outs):
                job.service += now - t0
                if isinstance(out, Generation) or closed or now > job.deadline or job.abandoned:
                    self.events.append(("done", job.seq))  # answered (or given up) now
                # a generation stopped early is never passed off as a whole answer
                if closed:
                    _resolve(job.fut, Generation(None, error=SHUTTING_DOWN))
                elif now > job.deadline:
                    _resolve(job.fut, Generation(None, error=DEADLINE))
                elif isinstance(out, Generation):
                    _resolve(job.fut, out)
                elif job.abandoned:
                    _resolve(job.fut, Generation(None, error=GONE))
                else:  # paused: back in the queue with what it has so far
                    job.state, job.queued = out, now
                    back.append(job)
            with self._cv:
                self._running = []
                self._pending.extend(back)
                self._cv.notify_all()
