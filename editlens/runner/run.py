"""The run loop: score a dataset with evaluators, durably and resumably.

* Every (sample, evaluator, settings) result is a row in the run directory's
  :class:`~editlens.runner.store.ResultsStore`, committed per batch; a rerun
  on the same directory skips finished rows, and changing one evaluator's
  settings recomputes only that evaluator.
* Images of the next batch are decoded in background threads while the
  current batch is scored.
* Ctrl-C, and SIGTERM (what batch schedulers send before killing a job),
  stop cleanly after the batch in flight: the summary and outputs are
  written as for a finished run (a second signal aborts at once).
* A sample whose images cannot be read is recorded as ``failed`` with the
  reason, and the run goes on.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

from editlens.core.embedded import TableImage
from editlens.core.images import ImageLoadOptions
from editlens.core.io import atomic_write
from editlens.core.types import EditSample, LoadedEdit, Score
from editlens.runner.loader import PrefetchExecutor
from editlens.runner.manifest import new_manifest, provenance_of
from editlens.runner.store import ResultsStore, config_hash, wide_records


class Evaluator(Protocol):
    """Anything that scores batches: metrics, judges, DICE."""

    @property
    def name(self) -> str: ...

    def score_batch(self, batch: Sequence[LoadedEdit]) -> list[Score]: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass
class RunResult:
    out_dir: Path
    computed: int  # rows written in this invocation
    reused: int  # (sample, evaluator) pairs already in the store
    interrupted: bool
    summary: dict[str, Any] = field(default_factory=dict)
    #: the signal that stopped the run (``signal.SIGINT`` or ``SIGTERM``), ``None`` when it was not stopped
    stopped_by: int | None = None

    @property
    def failed(self) -> int:
        """Results of this run's samples whose status is ``failed`` (a rerun retries them)."""
        return sum(c.get("failed", 0) for c in self.summary.get("counts", {}).values())


def in_run_order(evaluators: Sequence[Any]) -> list[Any]:
    """Evaluators marked ``always_run`` (the captioner) prepare samples for
    the others, so they go first; the rest keep their order."""
    return sorted(evaluators, key=lambda ev: not getattr(ev, "always_run", False))


class _StopFlag:
    """SIGINT or SIGTERM sets the flag (and says which); a second one aborts:
    KeyboardInterrupt for Ctrl-C, exit status 128 + 15 for SIGTERM."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.set = False
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.set:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            from editlens.errors import StopNow

            raise StopNow(128 + signum)
        self.set = True
        self.signum = signum
        _say(f"{signal.Signals(signum).name}: stopping after the batch in flight; finished batches are kept "
             "(send it again to stop at once)")

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


def run_evaluation(
    samples: Sequence[EditSample],
    evaluators: Sequence[Evaluator],
    out_dir: str | Path,
    *,
    batch_size: int = 16,
    image_options: ImageLoadOptions | None = None,
    workers: int = 2,
    progress: bool = True,
    command: list[str] | None = None,
    device: str = "cpu",
    dtype: str = "auto",
    extra_manifest: dict[str, Any] | None = None,
    on_batch: Callable[[int], None] | None = None,
    executor: Any = None,
    retry_failed: bool = True,
    retry_unscored: bool = False,
    wait: bool = False,
    calibration: Any = None,
) -> RunResult:
    """Score ``samples`` with ``evaluators`` into ``out_dir`` (resumable).

    ``executor`` defaults to a :class:`~editlens.runner.loader.PrefetchExecutor`;
    pass a :class:`~editlens.runner.executors.RayExecutor` to spread batches
    over a Ray cluster. Either way this process writes the store.

    A rerun redoes unfinished work: ``failed`` rows (transport errors,
    crashes) are retried unless ``retry_failed=False``; ``unscored`` rows (a
    real answer that could not be parsed) are kept unless ``retry_unscored``.
    The run directory is locked: a second process on it raises
    :class:`~editlens.runner.lock.RunLockedError`, or queues with ``wait=True``.
    ``calibration`` (a file from ``editlens calibrate``, or a loaded
    :class:`~editlens.meta.calibration.CalibrationSet`) adds ``calibrated`` to
    the details of every scored result of an evaluator it has a map for.
    """
    from editlens.runner.lock import RunLock

    out = Path(out_dir)
    with RunLock(out, wait=wait, on_wait=lambda who: _say(f"waiting for {who} to finish with {out}")):
        return _run_locked(samples, evaluators, out, batch_size=batch_size, image_options=image_options,
                           workers=workers, progress=progress, command=command, device=device, dtype=dtype,
                           extra_manifest=extra_manifest, on_batch=on_batch, executor=executor,
                           redo=(("failed",) if retry_failed else ()) + (("unscored",) if retry_unscored else ()),
                           calibration=calibration)


def _say(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def grouped_by_source(samples: Sequence[EditSample]) -> list[EditSample]:
    """``samples`` with the edits of each source image next to each other
    (sources in order of first appearance, samples in manifest order within).

    A model comparison lists one editor's edits after another's, so the same
    source photo would land in a different batch each time; grouped, a batch
    holds it several times, and the VLM backend and the embedding metrics
    encode it once. Exports keep the manifest's order.

    >>> a = [EditSample(f"{m}{i}", f"src{i}.png", f"{m}{i}.png", "edit") for m in "AB" for i in (1, 2)]
    >>> [s.id for s in grouped_by_source(a)]
    ['A1', 'B1', 'A2', 'B2']
    """
    first: dict[Any, int] = {}

    def group(s: EditSample) -> int:
        src = s.source
        key = (os.path.normpath(os.fspath(src)) if isinstance(src, (str, os.PathLike))
               else src.uri() if isinstance(src, TableImage) else id(src))
        return first.setdefault(key, len(first))

    keys = [group(s) for s in samples]
    return [samples[i] for i in sorted(range(len(samples)), key=keys.__getitem__)]


def _run_locked(samples: Sequence[EditSample], evaluators: Sequence[Evaluator], out: Path, *, batch_size: int,
                image_options: ImageLoadOptions | None, workers: int, progress: bool, command: list[str] | None,
                device: str, dtype: str, extra_manifest: dict[str, Any] | None,
                on_batch: Callable[[int], None] | None,
                executor: Any, redo: tuple[str, ...], calibration: Any = None) -> RunResult:
    evaluators = in_run_order(evaluators)
    if calibration is not None:
        from editlens.meta.calibration import load_calibration

        calibration = load_calibration(calibration)  # a bad file fails before any scoring
    store = ResultsStore(out)
    image_options = image_options or ImageLoadOptions()
    hashes = {ev.name: config_hash(result_identity(ev.describe())) for ev in evaluators}
    # evaluators marked always_run (the captioner) prepare samples for the others
    done = {ev.name: set() if getattr(ev, "always_run", False) else store.done(ev.name, hashes[ev.name], redo)
            for ev in evaluators}
    regular = [ev for ev in evaluators if not getattr(ev, "always_run", False)] or list(evaluators)
    todo = grouped_by_source([s for s in samples if any(s.id not in done[ev.name] for ev in regular)])
    reused = sum(len(done[ev.name] & {s.id for s in samples}) for ev in evaluators)

    from editlens.models.precision import decide

    precision = decide(dtype, device).to_dict()  # what --dtype/--device meant on this machine, and why
    # "provenance": what pins the evaluator beyond its settings, kept out of the result identity
    manifest = new_manifest(command, [{**ev.describe(), "config_hash": hashes[ev.name],
                                       "provenance": provenance_of(ev)} for ev in evaluators],
                            {"samples": len(samples), **(extra_manifest or {})}, precision["device"],
                            precision=precision)
    previous = store.get_meta("manifest")
    if previous:
        manifest["previous_runs"] = (previous.get("previous_runs") or []) + [
            {k: previous.get(k) for k in ("started", "finished", "command")}]
    if calibration is not None:
        manifest["calibration"] = calibration.describe()
    store.set_meta("manifest", manifest)
    store.record_configs(hashes)
    store.start_image_record()

    batches = [todo[i : i + batch_size] for i in range(0, len(todo), batch_size)]
    computed = 0
    interrupted = False
    stopped_by = None
    bar = _progress(len(todo), progress)
    started = time.time()
    if executor is None:
        executor = PrefetchExecutor(evaluators, image_options, workers)  # decoding overlaps scoring
    try:
        with _StopFlag() as stop:
            for bi, (batch, rows) in enumerate(executor.map(batches, hashes, done)):
                computed += store.write(rows, getattr(rows, "images", None))  # and the images it decoded
                bar.update(len(batch))
                if on_batch is not None:
                    on_batch(bi)
                if stop.set:
                    interrupted, stopped_by = True, stop.signum
                    break
    finally:
        executor.close()
    bar.close()

    # every evaluator stored for this run (its latest settings), not only this command's
    current = store.current_configs()
    if calibration is not None:
        _calibrate_rows(store, calibration, {ev: ch for ev, ch in current.items() if ev in calibration.maps})
    ids = {s.id for s in samples}
    all_rows = [r for r in store.rows(current) if r["sample_id"] in ids]
    names = [ev.name for ev in evaluators] + sorted(set(current) - set(hashes))
    summary = summarize(all_rows, names)
    summary.update({"samples": len(samples), "computed": computed, "reused": reused,
                    "interrupted": interrupted, "seconds": round(time.time() - started, 3)})
    manifest.update({"executor": executor.name, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "counts": summary["counts"],
                     "interrupted": interrupted})
    store.set_meta("manifest", manifest)
    store.set_meta("summary", summary)
    _write_outputs(out, all_rows, samples, summary, manifest)
    store.close()
    return RunResult(out, computed, reused, interrupted, summary, stopped_by)


def _calibrate_rows(store: ResultsStore, calibration: Any, configs: dict[str, str]) -> None:
    """Add ``calibrated`` to the stored scored rows of mapped evaluators (reused rows too, so a
    rerun with ``--calibration`` calibrates what earlier runs computed); rows already right are left."""
    if not configs:
        return
    changed = []
    for r in store.rows(configs):
        if r["status"] != "scored":
            continue
        score = Score(r["evaluator"], r["value"], "scored", r["reason"], r["details"] or {})
        new = calibration.apply(score)
        if (r["details"] or {}).get("calibrated") != new.details.get("calibrated"):
            changed.append((r["sample_id"], r["evaluator"], r["config_hash"], r["model"], new))
    if changed:
        store.write(changed)


def result_identity(described: dict[str, Any]) -> dict[str, Any]:
    """An evaluator's settings less those that cannot change its results
    (where answers are cached; how an engine's answers are fetched), so changing them recomputes nothing.

    >>> result_identity({"name": "viescore", "options": {"cache": False, "vlm": "u"}})
    {'name': 'viescore', 'options': {'vlm': 'u'}}
    """
    options = described.get("options")
    if isinstance(options, dict) and ("cache" in options or "http" in options):
        return {**described, "options": {k: v for k, v in options.items() if k not in ("cache", "http")}}
    return described


def summarize(rows: Iterable[dict[str, Any]], evaluators: Sequence[str]) -> dict[str, Any]:
    """Counts per status, mean of scored values, and distinct skip/fail reasons per evaluator."""
    counts: dict[str, dict[str, int]] = {e: {"scored": 0, "skipped": 0, "unscored": 0, "failed": 0, "info": 0}
                                         for e in evaluators}
    values: dict[str, list[float]] = {e: [] for e in evaluators}
    reasons: dict[str, dict[str, int]] = {e: {} for e in evaluators}
    by_model: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        ev = r["evaluator"]
        if ev not in counts:
            continue
        counts[ev][r["status"]] += 1
        if r["status"] == "scored":
            values[ev].append(r["value"])
            by_model.setdefault(r["model"] or "(none)", {}).setdefault(ev, []).append(r["value"])
        elif r["reason"]:
            key = r["reason"] if len(r["reason"]) < 200 else r["reason"][:200] + "..."
            reasons[ev][key] = reasons[ev].get(key, 0) + 1
    means = {e: (sum(v) / len(v) if v else None) for e, v in values.items()}
    return {
        "counts": counts,
        "means": means,
        "reasons": {e: r for e, r in reasons.items() if r},
        "by_model": {m: {e: sum(v) / len(v) for e, v in d.items()} for m, d in sorted(by_model.items())},
    }


#: keys of a results.jsonl record that a manifest column of the same name does not replace
_RESULT_KEYS = ("id", "model", "scores", "instruction", "edit_type", "images")


def _write_outputs(out: Path, rows: list[dict[str, Any]], samples: Sequence[EditSample],
                   summary: dict[str, Any], manifest: dict[str, Any]) -> None:
    import json

    from editlens.data.edit_types import edit_type_of

    # the manifest's extra columns and where the images are (paths, or cells of a parquet/arrow file),
    # so results stand alone and a report can show embedded images later
    extra = {s.id: {"instruction": s.instruction, "edit_type": edit_type_of(s), "images": s.image_refs(),
                    **{k: v for k, v in s.columns().items() if k not in _RESULT_KEYS}} for s in samples}
    records = wide_records(rows, extra)
    order = {s.id: i for i, s in enumerate(samples)}
    records.sort(key=lambda r: order.get(r["id"], math.inf))
    atomic_write(out / "results.jsonl", lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in records))
    atomic_write(out / "summary.json", lambda fh: json.dump(summary, fh, indent=2, default=str))
    atomic_write(out / "manifest.json", lambda fh: json.dump(manifest, fh, indent=2, default=str))


class _NoBar:
    def update(self, n: int) -> None: ...

    def close(self) -> None: ...


def _progress(total: int, enabled: bool) -> Any:
    if not enabled or total == 0:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="edit", desc="scoring", dynamic_ncols=True)
