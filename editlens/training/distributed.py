"""Training on several processes (data parallel), through ``accelerate``.

A trainer launched by ``accelerate launch`` or ``torchrun`` finds
``WORLD_SIZE`` > 1 in its environment; :func:`start` then joins the process
group through accelerate's :class:`~accelerate.PartialState` (NCCL between
GPUs, gloo between CPU processes) and :func:`local_device` places each
process on its own GPU (``cuda:LOCAL_RANK``). A plain run (no launcher) is one
process and needs neither accelerate nor a process group.

What the processes share (:class:`Processes`):

* the **global batch**: every setting keeps its one-process meaning, and the
  processes split each optimiser step's examples among themselves (the loop
  hands whole micro-batches to each, or the task takes its share of each
  micro-batch, see :attr:`editlens.training.LoopSettings.share`);
* **gradients**, averaged over the processes once per optimiser step
  (:meth:`Processes.average_gradients`, bucketed all-reduce: what DDP does,
  without requiring the tasks to call their models through a wrapper's
  ``forward``), so every process applies the same update to the same weights;
* the **logged figures**: each step's loss is the mean over the processes;
* **the run folder**: only the main process (rank 0) writes (log, checkpoints,
  curve, summary, exports) and prints; the others wait for it where its work
  decides what comes next (:meth:`Processes.on_main`), so an error there (a
  run folder with other settings, a failed export) stops every process with
  the same message instead of leaving them waiting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, TypeVar

from editlens.errors import InputError

T = TypeVar("T")

#: how long a process waits for the others (the main process validates and exports alone)
ENV_TIMEOUT = "EDITLENS_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 4 * 3600
#: gradients are all-reduced in flat buckets of about this many bytes
BUCKET_BYTES = 32 * 2**20


def launched_world() -> int:
    """The number of processes the launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    raw = os.environ.get("WORLD_SIZE", "1").strip() or "1"
    try:
        return max(1, int(raw))
    except ValueError:
        raise InputError(f"$WORLD_SIZE must be a whole number, got {raw!r}") from None


def local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK", "0") or 0)
    except ValueError:
        return 0


def local_device(device: str) -> str:
    """``device`` for this process: under a launcher with several processes, ``auto`` / ``cuda``
    become accelerate's device of this process, ``cuda:LOCAL_RANK`` (one GPU per process; the process
    group is joined here); an explicit ``cuda:N`` or ``cpu`` is kept, and so is anything in one process.

    >>> local_device("auto") if launched_world() == 1 else "auto"
    'auto'
    """
    if launched_world() <= 1:
        return device
    from editlens.models.precision import resolve_device

    resolved = resolve_device(device)
    if resolved != "cuda":
        return resolved
    procs = start(resolved)  # joins the process group (NCCL); accelerate assigns the GPU
    return str(procs.state.device) if procs.state is not None else f"cuda:{local_rank()}"


@dataclass
class Processes:
    """This process's place among the processes of a run (one process: rank 0 of 1)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None
    state: Any = field(default=None, repr=False)  # accelerate's PartialState

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def several(self) -> bool:
        return self.world > 1

    def describe(self) -> dict[str, Any]:
        return {"processes": self.world, "backend": self.backend}

    # -- collectives (no-ops for one process) --------------------------------------------------
    def barrier(self) -> None:
        if self.several:
            import torch.distributed as dist

            dist.barrier()

    def broadcast(self, obj: T) -> T:
        """The main process's ``obj`` on every process."""
        if not self.several:
            return obj
        import torch.distributed as dist

        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]  # type: ignore[return-value]

    def gather(self, obj: Any) -> list[Any]:
        """Every process's ``obj``, in rank order."""
        if not self.several:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def on_main(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the main process only and hand its result to every process; when it fails
        there, every process raises (the same :class:`InputError` message where it was one)."""
        if not self.several:
            return fn()
        result: Any = None
        failure: tuple[str, str] | None = None
        if self.main:
            try:
                result = fn()
            except InputError as exc:
                failure = ("input", str(exc))
            except BaseException as exc:  # noqa: BLE001 - told to the others, then raised here as it was
                self.broadcast(("error", f"{type(exc).__name__}: {exc}", None))
                raise
        kind, message, value = self.broadcast((failure[0], failure[1], None) if failure else ("ok", "", result))
        if kind == "input":
            raise InputError(message)
        if kind == "error":
            raise RuntimeError(f"the main process failed: {message}")
        return value  # type: ignore[return-value]

    def average_gradients(self, params: list[Any]) -> None:
        """Average the gradients of ``params`` over the processes (sum, then divide by the world size).

        A parameter no process computed a gradient for keeps ``None`` (as in one process, where
        the optimiser then leaves it alone); where only some did, the others count zeros.
        """
        if not self.several:
            return
        import torch
        import torch.distributed as dist

        device = next((p.device for p in params), torch.device("cpu"))
        have = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
        dist.all_reduce(have, op=dist.ReduceOp.MAX)
        grads = []
        for p, flag in zip(params, have.tolist()):
            if not flag:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        bucket: list[Any] = []
        size = 0
        for g in grads:
            if bucket and (g.dtype != bucket[0].dtype or g.device != bucket[0].device
                           or size + g.numel() * g.element_size() > BUCKET_BYTES):
                self._reduce_bucket(bucket)
                bucket, size = [], 0
            bucket.append(g)
            size += g.numel() * g.element_size()
        if bucket:
            self._reduce_bucket(bucket)

    def _reduce_bucket(self, grads: list[Any]) -> None:
        import torch
        import torch.distributed as dist

        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat.div_(self.world)
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n

    def broadcast_parameters(self, params: list[Any]) -> None:
        """The main process's values of ``params`` on every process (as DDP does when it starts)."""
        if not self.several:
            return
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            for p in params:
                dist.broadcast(p.data, src=0)

    def gather_rows(self, t: Any) -> Any:
        """Every process's rows of ``t`` (first dimension; the numbers may differ) concatenated in rank
        order, differentiable: the gradient of each process's rows flows back to that process."""
        if not self.several:
            return t
        import torch
        import torch.distributed.nn.functional as dnn

        sizes = [int(n) for n in self.gather(int(t.shape[0]))]
        top = max(sizes)
        if top == 0:
            return t
        pad = top - int(t.shape[0])
        if pad:
            t = torch.cat([t, t.new_zeros((pad, *t.shape[1:]))])
        parts = dnn.all_gather(t.contiguous())
        return torch.cat([part[:n] for part, n in zip(parts, sizes)])

    def share(self, n: int) -> slice:
        """This process's contiguous share of ``n`` items (the first ``n % world`` processes take one
        more)."""
        base, extra = divmod(n, self.world)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (1 if self.rank < extra else 0))


_ONE = Processes()
_current: Processes | None = None


def current() -> Processes:
    """The processes of this run as :func:`start` joined them (one process before that, or without a
    launcher)."""
    return _current if _current is not None else _ONE


def start(device: str = "cpu") -> Processes:
    """Join the launcher's process group (once per process) for training on ``device``: NCCL when
    it is a GPU, gloo otherwise. Without a launcher (``WORLD_SIZE`` unset or 1): one process."""
    global _current
    if _current is not None:
        return _current
    world = launched_world()
    if world <= 1:
        _current = _ONE
        return _current
    try:
        from accelerate import PartialState
    except ImportError:
        raise InputError(f"{world} processes were launched (WORLD_SIZE={world}); training on several processes "
                         "needs accelerate: pip install 'editlens[distributed]'") from None
    cpu = str(device).split(":")[0] != "cuda"
    try:
        timeout = timedelta(seconds=float(os.environ.get(ENV_TIMEOUT, DEFAULT_TIMEOUT_S)))
    except ValueError:
        raise InputError(f"${ENV_TIMEOUT} must be a number of seconds, got {os.environ[ENV_TIMEOUT]!r}") from None
    kwargs: dict[str, Any] = {"cpu": True, "backend": "gloo"} if cpu else {}
    state = PartialState(timeout=timeout, **kwargs)
    if state.num_processes != world:
        raise InputError(f"the launcher says {world} processes (WORLD_SIZE) but the process group has "
                         f"{state.num_processes}")
    _current = Processes(int(state.process_index), int(state.num_processes), int(state.local_process_index),
                         str(state.backend), state)
    return _current


def check_divides(count: int, what: str, processes: Processes | None = None, why: str = "") -> None:
    """A clear error when the processes cannot share ``count`` (e.g. ``--batch-size``) equally."""
    procs = processes or current()
    if procs.several and count % procs.world:
        raise InputError(f"{what} {count} does not split among {procs.world} processes "
                         f"({why or 'each takes an equal share'}); use a multiple of {procs.world}, "
                         "or launch a number of processes that divides it")


def choose_share(batch_size: int, grad_accum: int, processes: Processes | None = None) -> str:
    """How the processes share a step of ``grad_accum`` micro-batches of ``batch_size`` examples:
    ``"micro-batches"`` (whole ones, when the process count divides ``grad_accum``: every micro-batch
    computes exactly as in one process) or ``"examples"`` (an equal share of each micro-batch, when it
    divides ``batch_size``); else a clear error.

    >>> choose_share(4, 2, Processes(0, 2)), choose_share(4, 1, Processes(0, 2))
    ('micro-batches', 'examples')
    """
    procs = processes or current()
    if grad_accum % procs.world == 0:
        return "micro-batches"
    if batch_size % procs.world == 0:
        return "examples"
    raise InputError(f"--batch-size {batch_size} x --grad-accum {grad_accum} does not split among {procs.world} "
                     f"processes: they take whole micro-batches when --grad-accum is a multiple of {procs.world}, "
                     f"or equal shares of each when --batch-size is; change one, or launch a number of processes "
                     "that divides one")


def main_only(log: Callable[[str], None], processes: Processes | None = None) -> Callable[[str], None]:
    """``log`` on the main process, nothing on the others (one copy of every line)."""
    procs = processes

    def logged(message: str) -> None:
        if (procs or current()).main:
            log(message)

    return logged
