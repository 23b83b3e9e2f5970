"""The training loop every editlens system uses.

A system supplies a :class:`TrainingTask` — the model whose trainable
parameters learn, a deterministic ``batch(step, micro)``, the ``loss`` of a
batch, a ``validate`` and an ``export`` — and :func:`run` does the rest:

* **run directory** ``OUT/``: ``train_config.json`` (the run's identity and
  settings), ``log.jsonl`` (one record per optimiser step; validation results
  under ``"val"``), ``checkpoints/step-NNNNNNN/`` (``state.pt``: trainable
  tensors, optimiser, LR schedule, loss scaler; ``state.json``: step,
  identity, precision), the loss curve (``loss.png``), ``summary.json``, and
  whatever the task exports.
* **resume**: rerunning with the same ``OUT`` continues from the newest
  checkpoint; log lines past it are dropped and redone. A run whose identity
  (the settings that must match, e.g. LoRA rank, seed, batch size) differs is
  refused with a message naming each differing setting. Batches depend only
  on (seed, step) and torch's RNG is reseeded from (seed, step) before every
  step, so a resumed run computes exactly what an uninterrupted one would.
* **Ctrl-C / SIGTERM**: the current step finishes, a checkpoint is saved and
  :attr:`LoopResult.interrupted` is set (CLIs exit 130, or 143 for SIGTERM);
  a second signal stops at once — the state is saved when it is still that of
  a finished step (never in the middle of an optimiser update).
* **checkpoints** every ``save_every`` steps, at the end and on interruption,
  each written to a temp folder and renamed into place; the newest ``keep``
  are kept. Loading accounts for every key: a trainable parameter missing
  from the checkpoint, an unknown one, or a shape that differs is an error.
* **validation** every ``eval_every`` steps and after the last step
  (optionally before the first), under ``torch.no_grad`` and the model's
  eval mode.
* **several processes** (``accelerate launch`` / ``torchrun``; see
  :mod:`editlens.training.distributed` and docs/training-distributed.md):
  data parallel over the same global batch, gradients averaged once per
  optimiser step, the logged figures averaged over the processes; only the
  main process writes the run folder, validates, exports and prints.
  Every micro-batch reseeds torch's RNG from (seed, step, micro-batch), so a
  micro-batch computes the same wherever it runs.
* **optimisation**: gradient accumulation over ``grad_accum`` micro-batches,
  linear warm-up then constant / linear / cosine decay, gradient-norm
  clipping, and mixed precision from the policy
  (:func:`editlens.models.precision.decide` with purpose ``training``):
  trainable parameters are kept in float32 (master weights), the forward pass
  runs under autocast in the policy's dtype, float16 adds loss scaling. The
  decision (``Precision.to_dict()``) is recorded in every checkpoint and the
  summary.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from editlens.core.io import atomic_directory, read_json, write_json, write_jsonl
from editlens.errors import InputError
from editlens.training.distributed import current, main_only, start
from editlens.training.plot import PlotSpec, plot_training

DECAYS = ("constant", "linear", "cosine")
SHARES = ("examples", "micro-batches")
CONFIG_FILE = "train_config.json"
LOG_FILE = "log.jsonl"
SUMMARY_FILE = "summary.json"
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}


class TrainingTask:
    """What a system supplies to :func:`run`. Subclasses set ``model`` and
    implement :meth:`batch` and :meth:`loss`; the rest has defaults."""

    #: the module whose parameters with ``requires_grad`` are trained and checkpointed
    model: Any = None
    #: learning rate of the default optimiser
    lr: float = 1e-4

    def optimizer(self, params: list[Any]) -> Any:
        """The optimiser over ``params`` (the trainable parameters, float32)."""
        import torch

        return torch.optim.AdamW(params, lr=self.lr)

    def batch(self, step: int, micro: int) -> Any:
        """Micro-batch ``micro`` of optimiser step ``step`` (0-based); must depend only on them and the seed.
        With several processes and ``LoopSettings.share="examples"``, this process's share of it
        (``editlens.training.distributed.current().share(n)``)."""
        raise NotImplementedError

    def loss(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """``(loss tensor, {name: float})``: the loss to minimise and extra figures to log (averaged
        over micro-batches)."""
        raise NotImplementedError

    @property
    def has_validation(self) -> bool:
        return False

    def validate(self) -> dict[str, Any]:
        """Validation figures (JSON-serialisable); called under no_grad with the model in eval mode."""
        return {}

    def describe_validation(self, val: dict[str, Any]) -> str:
        """One line for the console."""
        return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in val.items()
                         if isinstance(v, (int, float, str)) or v is None)

    def step_info(self, step: int) -> dict[str, Any]:
        """Extra fields of step ``step``'s log record (e.g. its epoch)."""
        return {}

    def precision_record(self) -> dict[str, Any]:
        """What the task adds to the policy's record (e.g. 4-bit base weights, an 8-bit optimiser)."""
        return {}

    def identity_extra(self) -> dict[str, Any]:
        """Identity settings known only once the model and optimiser are built (e.g. an 8-bit
        optimiser's state does not load into AdamW); checked against the checkpoint's."""
        return {}

    def save_extra(self, folder: Path) -> None:
        """Write anything more into a checkpoint folder being built (e.g. a loadable adapter)."""

    def export(self, result: "LoopResult") -> dict[str, Any]:
        """The final outputs once training is done, ``{name: path}`` (a rerun of a finished run whose
        outputs all exist does nothing)."""
        return {}

    def summary_extra(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """More entries for ``summary.json``."""
        return {}


@dataclass
class LoopSettings:
    """How :func:`run` trains; everything that is not the task's business."""

    out: str | Path
    steps: int  # optimiser steps in all (a resumed run counts the steps already done)
    precision: Any  # editlens.models.precision.Precision (purpose "training")
    identity: dict[str, Any] = field(default_factory=dict)  # settings a resumed run must share
    config: dict[str, Any] = field(default_factory=dict)  # every setting, recorded in train_config.json
    seed: int = 0
    grad_accum: int = 1
    warmup_steps: int = 0
    decay: str = "constant"
    max_grad_norm: float = 0.0  # 0: no clipping
    save_every: int = 0  # 0: only at the end and on interruption
    keep: int = 2
    eval_every: int = 0  # 0: only after the last step
    eval_at_start: bool = False  # also validate the untrained model (logged as step 0)
    report_every: int | None = None  # console lines (None: about ten per run)
    progress: bool = True
    desc: str = "train"
    restart: bool = False  # ignore (and remove) an earlier run in ``out``
    plot: PlotSpec | None = field(default_factory=PlotSpec)
    plot_interval_s: float = 60.0  # the curve is redrawn at a checkpoint at most this often (and at the end)
    log: Callable[[str], None] = print
    # how several processes share a step's ``grad_accum`` micro-batches: "micro-batches": each process
    # computes grad_accum / world whole ones (``batch(step, micro)`` is called with the global micro
    # index); "examples": every process computes every micro-batch index and the task's ``batch`` takes
    # this process's share of its examples (:func:`editlens.training.distributed.current`)
    share: str = "examples"
    log_to: str | None = None  # --log-to tensorboard|wandb: every log record's figures also go there
    # several processes: "ddp" (each holds the whole model) or "fsdp" (its layers sharded; see
    # editlens.training.fsdp); None: "fsdp" when launched by ``accelerate launch --use_fsdp``, else "ddp"
    sharding: str | None = None

    def check(self) -> None:
        for name in ("steps", "grad_accum", "keep"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "save_every", "eval_every"):
            if int(getattr(self, name)) < 0:
                raise InputError(f"{name} must be 0 or more, got {getattr(self, name)}")
        if self.decay not in DECAYS:
            raise InputError(f"decay must be one of {', '.join(DECAYS)}, got {self.decay!r}")
        if self.share not in SHARES:
            raise ValueError(f"share must be one of {', '.join(SHARES)}, got {self.share!r}")
        from editlens.training.fsdp import chosen_sharding

        self.sharding = chosen_sharding(self.sharding)


@dataclass
class LoopResult:
    out: Path
    steps_done: int
    resumed_from: int
    interrupted: bool = False
    signal: str | None = None  # SIGINT / SIGTERM when interrupted
    finished: bool = False  # trained to the end and exported
    rows: list[dict[str, Any]] = field(default_factory=list)  # the log, this run's and the resumed one's
    outputs: dict[str, Any] = field(default_factory=dict)  # what the task exported
    summary: dict[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None

    @property
    def exit_code(self) -> int:
        """What a command should exit with: 0, or 130 (Ctrl-C) / 143 (SIGTERM) when interrupted."""
        return EXIT_CODES.get(self.signal or "SIGINT", 130) if self.interrupted else 0

    @property
    def evals(self) -> list[dict[str, Any]]:
        """Every validation, ``{"step": N, **figures}``."""
        return [{"step": r["step"], **r["val"]} for r in self.rows if isinstance(r.get("val"), dict)]


# -- run directory --------------------------------------------------------------------------------

def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, default=str))  # tuples -> lists, paths -> str, as stored


def identity_difference(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """``["rank was 8, now 4", ...]`` for every setting that differs.

    >>> identity_difference({"rank": 8, "seed": 0}, {"rank": 4, "seed": 0})
    ['rank was 8, now 4']
    """
    now, before = _jsonable(now), _jsonable(before)

    def shown(v: Any) -> str:
        return v if isinstance(v, str) else "unset" if v is None else json.dumps(v)

    return [f"{k} was {shown(before.get(k))}, now {shown(now.get(k))}"
            for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]


def _refuse(where: Path, diffs: list[str]) -> None:
    raise InputError(f"{where} holds a run with other settings ({'; '.join(diffs)}); rerun with the same "
                     "settings to resume it, or use another --out (or --restart to discard it)")


def prepare_run_dir(out: str | Path, identity: dict[str, Any], config: dict[str, Any] | None = None,
                    restart: bool = False) -> Path:
    """Create ``out`` and record the run's identity, or check it against the run already there.

    Call it before loading models so that a mismatch is refused at once;
    :func:`run` checks again against the checkpoint (whose identity may hold
    settings known only once the model is built). ``restart`` removes an
    earlier run's checkpoints, log and summary. With several processes the
    main one does it and a refusal stops them all.
    """
    current().on_main(lambda: _prepare_run_dir(out, identity, config, restart))
    return Path(out)


def _prepare_run_dir(out: str | Path, identity: dict[str, Any], config: dict[str, Any] | None,
                     restart: bool) -> Path:
    import shutil

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    saved = out / CONFIG_FILE
    if restart:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        for name in (LOG_FILE, SUMMARY_FILE, CONFIG_FILE, "train_state.pt", "checkpoint.pt"):
            (out / name).unlink(missing_ok=True)
    else:
        legacy = [p.name for p in (out / "train_state.pt", out / "checkpoint.pt") if p.is_file()]
        legacy += [f"checkpoints/{p.name}" for p in sorted((out / "checkpoints").glob("step-*"))
                   if (p / "state.json").is_file() and not (p / "state.pt").is_file()]
        if legacy:
            raise InputError(f"{out} holds a checkpoint written by an earlier editlens ({', '.join(legacy[:3])}) "
                             "that this version does not resume; use another --out, or --restart to discard it")
    if not restart and saved.is_file():
        doc = read_json(saved, "the run's summary", hint="use another --out or --restart")
        if not isinstance(doc, dict):
            raise InputError(f"{saved}: not a run summary (a JSON object); use another --out or --restart")
        before = doc.get("identity")
        if before is not None:
            diffs = identity_difference(before, identity)
            if diffs:
                _refuse(out, diffs)
    write_json(saved, {"identity": _jsonable(identity), "config": _jsonable(config or {})}, default=str)
    return out


def read_log(out: str | Path, upto: int | None = None) -> list[dict[str, Any]]:
    """The records of ``OUT/log.jsonl`` (up to step ``upto``); a line cut off by a crash is skipped."""
    p = Path(out) / LOG_FILE
    if not p.is_file():
        return []
    rows = []
    for line in p.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # only the last line can be cut, by a crash while it was written
        if isinstance(r, dict) and isinstance(r.get("step"), int) and (upto is None or r["step"] <= upto):
            rows.append(r)
    return rows


def _checkpoints(out: Path) -> list[tuple[int, Path]]:
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for p in root.glob("step-*"):
        num = p.name[5:]
        if num.isdigit() and (p / "state.json").is_file() and (p / "state.pt").is_file():
            found.append((int(num), p))
    return sorted(found)


def latest_checkpoint(out: str | Path) -> Path | None:
    """The newest complete checkpoint folder in ``OUT/checkpoints`` (``None`` when there is none)."""
    found = _checkpoints(Path(out))
    return found[-1][1] if found else None


# -- parameters, precision, schedule --------------------------------------------------------------

def trainable_parameters(model: Any) -> list[tuple[str, Any]]:
    """``(name, parameter)`` of every parameter that trains, each shared parameter once."""
    seen: set[int] = set()
    out = []
    for name, p in model.named_parameters():
        if p.requires_grad and id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def master_weights_fp32(model: Any) -> list[Any]:
    """Trainable parameters in float32 (mixed precision keeps the master copy in full precision;
    the forward pass computes in the autocast dtype). Returns them."""
    import torch

    params = []
    for _, p in trainable_parameters(model):
        if p.dtype in (torch.float16, torch.bfloat16):
            p.data = p.data.float()
        params.append(p)
    return params


def lr_factor(step: int, total: int, warmup: int, decay: str) -> float:
    """Multiplier of the base learning rate at optimiser step ``step`` (0-based).

    >>> [round(lr_factor(s, 10, 2, "linear"), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.5, 0.125]
    """
    if warmup and step < warmup:
        return (step + 1) / warmup
    if decay == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if decay == "linear":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def _seed_step(seed: int, step: int, micro: int = 0) -> None:
    """Torch's RNG for micro-batch ``micro`` of step ``step``: the same in whichever process computes it
    (micro-batch 0 is seeded as before micro-batches had seeds of their own)."""
    import torch

    base = int(seed) * 1_000_003 + int(step)
    torch.manual_seed((base if not micro else base * 65_537 + int(micro)) % (2**63))


# -- checkpoints ----------------------------------------------------------------------------------

def save_checkpoint(out: Path, step: int, model: Any, optimizer: Any, scheduler: Any, scaler: Any,
                    meta: dict[str, Any], keep: int, extra: Callable[[Path], None] | None = None,
                    optimizer_state: dict[str, Any] | None = None) -> Path:
    """``OUT/checkpoints/step-NNNNNNN/`` built in a temp folder and renamed into place; older ones pruned.
    ``optimizer_state``: the optimiser's whole state when it is not ``optimizer.state_dict()`` (FSDP)."""
    import torch

    target = out / "checkpoints" / f"step-{step:07d}"
    with atomic_directory(target) as tmp:
        optim = optimizer_state if optimizer_state is not None else optimizer.state_dict()
        torch.save({"trainable": {n: p.detach().to("cpu").clone() for n, p in trainable_parameters(model)},
                    "optimizer": optim, "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict()}, tmp / "state.pt")
        if extra is not None:
            extra(tmp)
        write_json(tmp / "state.json", {"step": step, **meta, "time": time.time()}, default=str)
    import shutil

    for _, old in _checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_trainable(model: Any, state: dict[str, Any], where: str | Path) -> None:
    """Copy ``state`` into the model's trainable parameters; every key must match one, every
    trainable parameter must be there, with its shape."""
    import torch

    mine = dict(trainable_parameters(model))
    missing = sorted(set(mine) - set(state))
    unexpected = sorted(set(state) - set(mine))
    shapes = sorted(f"{n} {tuple(state[n].shape)} vs {tuple(mine[n].shape)}" for n in set(mine) & set(state)
                    if tuple(state[n].shape) != tuple(mine[n].shape))
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"{len(missing)} trainable parameter(s) missing from it (e.g. {missing[:3]})")
        if unexpected:
            parts.append(f"{len(unexpected)} unknown to this model (e.g. {unexpected[:3]})")
        if shapes:
            parts.append(f"{len(shapes)} with another shape (e.g. {shapes[:2]})")
        raise InputError(f"{where}: the checkpoint does not fit this model: {'; '.join(parts)}; "
                         "use another --out (or --restart)")
    with torch.no_grad():
        for n, v in state.items():
            mine[n].copy_(v.to(mine[n].device, mine[n].dtype))


def load_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, scaler: Any,
                    identity: dict[str, Any]) -> int:
    """Restore a checkpoint after checking its identity; returns its step."""
    import torch

    try:
        meta = json.loads((path / "state.json").read_text())
        blob = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a damaged checkpoint is named, not a traceback
        raise InputError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc}); remove it to resume "
                         "from the one before, or use --restart") from None
    diffs = identity_difference(meta.get("identity") or {}, identity)
    if diffs:
        _refuse(path.parent.parent, diffs)
    missing = [k for k in ("trainable", "optimizer", "scheduler", "scaler") if k not in blob]
    if missing:
        raise InputError(f"{path}/state.pt: not a training checkpoint (no {', '.join(missing)})")
    load_trainable(model, blob["trainable"], path / "state.pt")
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    if blob["scaler"]:
        scaler.load_state_dict(blob["scaler"])
    return int(meta["step"])


# -- signals --------------------------------------------------------------------------------------

class _StopRequests:
    """SIGINT/SIGTERM set a flag the loop reads at a clean point; a second one stops at once."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.signal: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signal is not None:
            raise KeyboardInterrupt(name)
        self.signal = name
        self.log(f"{name}: stopping after this step and saving a checkpoint (send it again to stop at once)")

    def __enter__(self) -> "_StopRequests":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):  # not settable here (e.g. an embedded interpreter)
                    pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)


# -- the loop -------------------------------------------------------------------------------------

def autocast_context(precision: Any) -> Callable[[], Any]:
    """A factory of the forward pass's autocast context for ``precision`` (a no-op for float32)."""
    import torch

    dtype = precision.autocast_dtype
    kind = str(precision.device).split(":")[0]

    def ctx() -> Any:
        return torch.autocast(kind, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    return ctx


@contextlib.contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    import torch

    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was)


def _mean(values: list[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Loss at the start and end of the run: means over the first and last fifth of the steps
    (single batches are noisy), and the single first and last values."""
    losses = [r["loss"] for r in rows if isinstance(r.get("loss"), (int, float))]
    k = max(1, len(losses) // 5)
    evals = [{"step": r["step"], **r["val"]} for r in rows if isinstance(r.get("val"), dict)]
    return {"first_loss": _mean(losses[:k]), "last_loss": _mean(losses[-k:]), "window": k,
            "first_step_loss": losses[0] if losses else None, "last_step_loss": losses[-1] if losses else None,
            "val": evals[-1] if evals else None}


def run(task: TrainingTask, s: LoopSettings) -> LoopResult:
    """Train ``task`` as ``s`` says (resuming what ``s.out`` holds); see the module docstring."""
    return _Run(task, s).run()


class _Run:
    """One call of :func:`run`: set-up and resume, the steps, the interruption, the end."""

    def __init__(self, task: TrainingTask, s: LoopSettings) -> None:
        import torch

        s.check()
        self.procs = procs = start(s.precision.device)
        self.task, self.s, self.log, self.out = task, s, main_only(s.log, procs), Path(s.out)
        self.steps, self.warmup, self.decay = int(s.steps), int(s.warmup_steps), s.decay
        if s.share == "micro-batches" and s.grad_accum % procs.world:
            raise InputError(f"{s.grad_accum} micro-batches per step do not split among {procs.world} processes; "
                             f"use a multiple of {procs.world}")
        # micro-batches this process computes per step, and the (global) index of its first
        self.local_micro = s.grad_accum // procs.world if s.share == "micro-batches" else s.grad_accum
        self.first_micro = procs.rank * self.local_micro if s.share == "micro-batches" else 0
        prepare_run_dir(self.out, s.identity, s.config, restart=s.restart)
        self.model = task.model
        self.params = master_weights_fp32(self.model)
        if not self.params:
            raise InputError("nothing to train: every parameter is frozen")
        procs.broadcast_parameters(self.params)  # every process starts from the main one's weights
        self.sharded = None
        if s.sharding == "fsdp":
            from editlens.training.fsdp import shard

            self.sharded = shard(self.model, procs, s.precision)
            if self.sharded is not None:  # the layers' parameters are now FSDP's (sharded) ones
                self.params = [p for _, p in trainable_parameters(self.model)]
        # the parameters whose gradients the loop averages (FSDP reduce-scatters its own)
        self.replicated = self.sharded.replicated(self.params) if self.sharded is not None else self.params
        self.optimizer = task.optimizer(self.params)
        self.base_lrs = [g["lr"] for g in self.optimizer.param_groups]  # this run's: a resumed state must not win
        steps, warmup, decay = self.steps, self.warmup, self.decay
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                           lambda k: lr_factor(k, steps, warmup, decay))
        kind = str(s.precision.device).split(":")[0]
        self.scaler = torch.amp.GradScaler(kind, enabled=bool(s.precision.needs_grad_scaler))
        self.autocast = autocast_context(s.precision)
        self.record = {**s.precision.to_dict(), **task.precision_record()}
        self.identity = {**s.identity, **task.identity_extra()}
        self.meta = {"identity": _jsonable(self.identity), "precision": self.record}
        self.last_plot = 0.0
        self.logf: Any = None
        from editlens.training.tracking import open_tracker

        # a missing package fails here, before training; several processes: the main one logs
        self.tracker = open_tracker(s.log_to, self.out, s.config) if procs.main else None

    # -- pieces ---------------------------------------------------------------------------------
    def plot(self, force: bool = True) -> None:
        # drawing takes about a second: during training at most every plot_interval_s
        s = self.s
        if s.plot is not None and self.procs.main and (force or time.time() - self.last_plot >= s.plot_interval_s):
            plot_training(self.result.rows, self.out / s.plot.filename, s.plot)
            self.last_plot = time.time()

    def whole(self, write_back: bool = False) -> Any:
        """The whole model on every process for the main process's work (FSDP: a collective gathering
        the shards; else nothing to do)."""
        return self.sharded.full(write_back) if self.sharded is not None else contextlib.nullcontext()

    def checkpoint(self, step: int) -> None:
        # the main process writes (the others hold the same weights); no waiting on one another here,
        # which also holds when a second Ctrl-C stopped the processes at different points (FSDP: every
        # process helps gather the whole state first)
        ck = self.result.checkpoint
        if step == 0 or (ck is not None and ck.name == f"step-{step:07d}" and (ck.is_dir() or not self.procs.main)):
            return  # nothing trained yet, or saved already
        if self.sharded is not None:
            with self.whole():
                state = self.sharded.full_optimizer_state(self.optimizer)
                if self.procs.main:
                    self.result.checkpoint = save_checkpoint(
                        self.out, step, self.model, self.optimizer, self.scheduler, self.scaler, self.meta,
                        self.s.keep, self.task.save_extra, optimizer_state=state)
            if not self.procs.main:
                self.result.checkpoint = self.out / "checkpoints" / f"step-{step:07d}"
            return
        if not self.procs.main:
            self.result.checkpoint = self.out / "checkpoints" / f"step-{step:07d}"
            return
        self.result.checkpoint = save_checkpoint(self.out, step, self.model, self.optimizer, self.scheduler,
                                                 self.scaler, self.meta, self.s.keep, self.task.save_extra)

    def validate(self) -> dict[str, Any]:
        """The task's validation, on the main process (the others wait for its figures)."""
        def main() -> dict[str, Any]:
            with _eval_mode(self.model), self.autocast():
                return self.task.validate()

        with self.whole():
            return self.procs.on_main(main)

    def write(self, rec: dict[str, Any]) -> None:
        if self.logf is not None:
            self.logf.write(json.dumps(rec, default=str) + "\n")
            self.logf.flush()
        self.result.rows.append(rec)
        if self.tracker is not None:
            from editlens.training.tracking import scalars_of

            self.tracker.log(int(rec.get("step") or 0), scalars_of(rec))

    def resume(self) -> int:
        ck = latest_checkpoint(self.out)
        start = 0
        if ck:
            with self.whole(write_back=True):  # FSDP: the whole state loads, then is sharded again
                start = load_checkpoint(ck, self.model, self.optimizer, self.scheduler, self.scaler, self.identity)
            if self.sharded is not None:
                self.sharded.shard_optimizer_state(self.optimizer)
        if start:  # the learning rate is not part of the identity: a rerun with another --lr uses it from here on
            self.scheduler.base_lrs = list(self.base_lrs)
            for group, base in zip(self.optimizer.param_groups, self.base_lrs):
                group["initial_lr"], group["lr"] = base, base * lr_factor(start, self.steps, self.warmup, self.decay)
        rows = read_log(self.out, upto=start)
        self.procs.barrier()  # every process has read the log before the main one rewrites it
        if self.procs.main:
            write_jsonl(self.out / LOG_FILE, rows)  # lines past the checkpoint are redone
        self.result = LoopResult(self.out, start, start, rows=rows, checkpoint=ck)
        if start:
            self.log(f"resumed from {ck}: step {start} of {self.steps} done")
        return start

    def already_done(self, start: int) -> bool:
        summary_path = self.out / SUMMARY_FILE
        if start < self.steps or not summary_path.is_file():
            return False
        done = read_json(summary_path, "the run's summary")
        outputs = done.get("outputs") or {}
        if not (done.get("finished") and done.get("steps_done") == start
                and all(Path(str(v)).exists() for v in outputs.values())):
            return False
        self.result.finished, self.result.outputs, self.result.summary = True, outputs, done
        self.log(f"{self.out}: already trained to step {start}; nothing to do")
        return True

    # -- the run --------------------------------------------------------------------------------
    def run(self) -> LoopResult:
        start = self.resume()
        if self.already_done(start):
            return self.result
        self.logf = open(self.out / LOG_FILE, "a", encoding="utf-8") if self.procs.main else None
        try:
            step, phase, pending = self.steps_from(start)
            if self.result.interrupted:
                return self.stopped(step, phase, pending)
            return self.finish(step)
        finally:
            if self.logf is not None:
                self.logf.close()
            if self.tracker is not None:
                self.tracker.close()

    def steps_from(self, start: int) -> tuple[int, str, dict[str, Any] | None]:
        """Train from step ``start``; returns (step reached, phase when it stopped, an unwritten record)."""
        import torch

        task, s, result = self.task, self.s, self.result
        report_every = s.report_every or max(1, self.steps // 10)
        from tqdm.auto import tqdm

        procs = self.procs
        bar = tqdm(total=self.steps, initial=min(start, self.steps), desc=s.desc, unit="step",
                   disable=not (s.progress and procs.main), dynamic_ncols=True)
        step = start
        phase = "clean"  # "step": gradients being computed (the weights are still step's); "update": changing
        pending: dict[str, Any] | None = None
        halt: str | None = None  # with several processes: a stop any of them was asked for, agreed after a step
        t0 = time.time()
        try:
            with _StopRequests(self.log) as stop:
                if s.eval_at_start and start == 0 and task.has_validation and not result.rows:
                    val = self.validate()
                    self.write({"step": 0, "val": val})
                    self.log(f"before training: {task.describe_validation(val)}")
                self.model.train()
                while step < self.steps and (halt if procs.several else stop.signal) is None:
                    phase = "step"
                    self.optimizer.zero_grad(set_to_none=True)
                    agg: dict[str, float] = {}
                    for micro in range(self.first_micro, self.first_micro + self.local_micro):
                        _seed_step(s.seed, step, micro)
                        batch = task.batch(step, micro)
                        with self.autocast():
                            loss, figures = task.loss(batch)
                        value = float(loss.detach())
                        self.scaler.scale(loss / self.local_micro).backward()
                        for k, v in {"loss": value, **figures}.items():
                            v = float(v.detach()) if hasattr(v, "detach") else float(v)
                            agg[k] = agg.get(k, 0.0) + v / self.local_micro
                    if procs.several:
                        procs.average_gradients(self.replicated)
                        shared = procs.gather((agg, stop.signal))
                        agg = _mean_figures([a for a, _ in shared])
                        halt = next((sig for _, sig in shared if sig), None)
                    if not math.isfinite(agg["loss"]):
                        raise InputError(f"loss became {agg['loss']} at step {step + 1}; lower the learning rate "
                                         "(--lr) or check the data")
                    phase = "update"
                    if s.max_grad_norm > 0:
                        self.scaler.unscale_(self.optimizer)
                        if self.sharded is not None:
                            self.sharded.clip_grad_norm_(self.params, s.max_grad_norm)
                        else:
                            torch.nn.utils.clip_grad_norm_(self.params, s.max_grad_norm)
                    lr = self.optimizer.param_groups[0]["lr"]
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                    self.scheduler.step()
                    step += 1
                    phase = "clean"
                    pending = {"step": step, **task.step_info(step - 1), **agg, "lr": lr,
                               "time": round(time.time() - t0, 3)}
                    if task.has_validation and ((s.eval_every and step % s.eval_every == 0) or step == self.steps):
                        pending["val"] = self.validate()
                    rec, pending = pending, None
                    self.write(rec)
                    result.steps_done = step
                    bar.update(1)
                    bar.set_postfix(loss=f"{agg['loss']:.4f}")
                    if step % report_every == 0 or step == self.steps:
                        _report(self.log, result.rows, step, self.steps, report_every, task, list(agg))
                    if s.save_every and step % s.save_every == 0 and step < self.steps:
                        self.checkpoint(step)
                        self.plot(force=False)
                signalled = halt if procs.several else stop.signal
                if signalled is not None and step < self.steps:
                    result.interrupted, result.signal = True, signalled
        except KeyboardInterrupt as exc:
            result.interrupted, result.signal = True, (str(exc) if str(exc) in EXIT_CODES else "SIGINT")
        finally:
            bar.close()
        return step, phase, pending

    def stopped(self, step: int, phase: str, pending: dict[str, Any] | None) -> LoopResult:
        """After Ctrl-C/SIGTERM: save what is clean, say how to go on."""
        if phase == "update":
            # stopped inside the optimiser update: the weights are neither step's nor the next's
            ck = self.result.checkpoint
            self.log(f"interrupted during the update of step {step + 1}: not saved; "
                     + (f"the checkpoint {ck} stands" if ck else "nothing saved"))
        else:
            if pending is not None:  # interrupted while validating: the step itself is done
                pending.pop("val", None)
                self.write(pending)
            self.checkpoint(step)
            ck = self.result.checkpoint
            self.log(f"interrupted at step {step}: " + (f"checkpoint {ck}; " if ck else "nothing trained yet; ")
                     + "rerun the same command to resume")
        self.plot()
        self.result.steps_done = step
        self.summarise()
        return self.result

    def finish(self, step: int) -> LoopResult:
        """The last validation (if a rerun skipped it), checkpoint, curve, export, summary."""
        if step >= self.steps and self.task.has_validation and \
                not any(r["step"] == step and "val" in r for r in self.result.rows):
            self.write({"step": step, "val": self.validate()})  # a rerun of a run stopped before its end
        self.checkpoint(step)
        self.plot()

        def export() -> dict[str, Any]:
            with self.autocast():
                return self.task.export(self.result) or {}

        with self.whole():
            self.result.outputs = self.procs.on_main(export)  # the main process exports; the others learn where
        self.result.finished = True
        self.summarise()
        return self.result

    def summarise(self) -> None:
        result, s = self.result, self.s
        summary = {"steps": self.steps, "steps_done": result.steps_done, "resumed_from": result.resumed_from,
                   "finished": result.finished, "interrupted": result.interrupted, "signal": result.signal,
                   **summarise(result.rows), "precision": self.record, "identity": _jsonable(self.identity),
                   "checkpoint": str(result.checkpoint) if result.checkpoint else None,
                   "log": str(self.out / LOG_FILE),
                   "loss_curve": str(self.out / s.plot.filename) if s.plot is not None else None,
                   "outputs": result.outputs, **self.task.summary_extra(result.rows), **self.procs.describe(),
                   **(self.sharded.describe() if self.sharded is not None else {})}
        result.summary = _jsonable(summary)
        if self.procs.main:
            write_json(self.out / SUMMARY_FILE, result.summary)


def _mean_figures(per_process: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's mean over the processes that have it (every process has the loss).

    >>> _mean_figures([{"loss": 1.0, "x": 2.0}, {"loss": 3.0}])
    {'loss': 2.0, 'x': 2.0}
    """
    keys = list(dict.fromkeys(k for d in per_process for k in d))
    return {k: float(sum(d[k] for d in per_process if k in d) / sum(1 for d in per_process if k in d)) for k in keys}


def _report(log: Callable[[str], None], rows: list[dict[str, Any]], step: int, steps: int, every: int,
            task: TrainingTask, keys: list[str]) -> None:
    win = [r for r in rows if r["step"] > step - every and isinstance(r.get("loss"), (int, float))]
    means = {k: _mean([r[k] for r in win if isinstance(r.get(k), (int, float))]) for k in keys}
    parts = ", ".join(f"{k} {v:.4f}" for k, v in means.items() if k != "loss" and v is not None)
    line = f"step {step:>5}/{steps}  loss {means.get('loss', float('nan')):.4f}"
    line += f" ({parts}; " if parts else " ("
    line += f"mean of the last {len(win)} steps)"
    val = rows[-1].get("val") if rows and rows[-1]["step"] == step else None
    if isinstance(val, dict):
        line += f"  validation: {task.describe_validation(val)}"
    log(line)
