"""Executors: where batches are scored. The driver always owns the store.

* :class:`LocalExecutor` scores in this process; images of the next batch
  are decoded in background threads while the current one is scored.
* :class:`RayExecutor` sends batches to Ray actors, each holding its own
  loaded evaluators (one actor per worker or GPU), and yields their rows as
  they finish. The driver writes them to the same store, so resume, failures
  and outputs behave exactly as with the local executor.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterator, Sequence

from editlens.core.images import ImageLoadOptions
from editlens.core.types import EditSample, LoadedEdit, Score
from editlens.errors import EditlensError, ModelUnavailableError
from editlens.runner.isolation import score_isolated

Row = tuple[str, str, str, "str | None", Score]


def load_sample(sample: EditSample, options: ImageLoadOptions) -> LoadedEdit | str:
    """The decoded sample, or the reason it could not be decoded."""
    try:
        return sample.load(options)
    except EditlensError as exc:
        return str(exc)
    except Exception as exc:  # a decoder bug must not end a 10k-sample run
        return f"{type(exc).__name__}: {exc}"


class Rows(list):
    """A batch's result rows, and ``images``: ``{sample_id: {role: reference}}``
    of the image files its samples were decoded from (the run store records
    them: ``editlens view`` serves those and no other file)."""

    def __init__(self, rows: Sequence[Row] = (), images: dict[str, dict[str, str]] | None = None) -> None:
        super().__init__(rows)
        self.images = images or {}


def score_batch(batch: Sequence[EditSample], loaded: Sequence[LoadedEdit | str], evaluators: Sequence[Any],
                hashes: dict[str, str], done: dict[str, set[str]]) -> Rows:
    """Rows for every (sample, evaluator) pair of the batch not already done."""
    rows = Rows(images={s.id: s.image_refs() for s, ld in zip(batch, loaded)
                        if isinstance(ld, LoadedEdit) and s.image_refs()})
    for ev in evaluators:
        need = [(s, ld) for s, ld in zip(batch, loaded) if s.id not in done.get(ev.name, ())]
        ok = [(s, ld) for s, ld in need if isinstance(ld, LoadedEdit)]
        for s, ld in need:
            if isinstance(ld, str):
                # flagged: an input that cannot be decoded is not a lost request (a rerun of the same file fails again)
                rows.append((s.id, ev.name, hashes[ev.name], s.model,
                             Score(ev.name, None, "failed", ld, {"input_unreadable": True})))
        if not ok:
            continue
        # one bad sample fails alone; a missing model stops the run with its fix
        scores = score_isolated(ev, [ld for _, ld in ok])
        for (s, _), score in zip(ok, scores):
            rows.append((s.id, ev.name, hashes[ev.name], s.model, score))
    return rows


class LocalExecutor:
    name = "local"

    def __init__(self, evaluators: Sequence[Any], image_options: ImageLoadOptions, workers: int = 2) -> None:
        self.evaluators = list(evaluators)
        self.image_options = image_options
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers))

    def map(self, batches: Sequence[list[EditSample]], hashes: dict[str, str],
            done: dict[str, set[str]]) -> Iterator[tuple[list[EditSample], list[Row]]]:
        def submit(batch: list[EditSample]) -> list[Future]:
            return [self.pool.submit(load_sample, s, self.image_options) for s in batch]

        pending = submit(batches[0]) if batches else []
        try:
            for i, batch in enumerate(batches):
                loaded = [f.result() for f in pending]
                pending = submit(batches[i + 1]) if i + 1 < len(batches) else []  # prefetch
                yield batch, score_batch(batch, loaded, self.evaluators, hashes, done)
        finally:
            for f in pending:
                f.cancel()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class _BatchWorker:
    """Body of a Ray actor: builds its evaluators once, then scores batches."""

    def __init__(self, specs: list[tuple[str, dict[str, Any]]], image_options: ImageLoadOptions) -> None:
        from editlens.metrics.registry import create_metric

        self.evaluators = [create_metric(name, **opts) for name, opts in specs]
        self.image_options = image_options

    def score(self, batch: list[EditSample], hashes: dict[str, str], done: dict[str, set[str]]) -> list[Row]:
        loaded = [load_sample(s, self.image_options) for s in batch]
        return score_batch(batch, loaded, self.evaluators, hashes, done)


def evaluator_specs(evaluators: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for ev in evaluators:
        spec = getattr(ev, "spec", None)
        if spec is None:
            raise EditlensError(f"evaluator {ev.name!r} is not from the registry; the Ray executor rebuilds "
                                "evaluators on each worker by registry name and options")
        specs.append((spec.name, dict(getattr(ev, "options", {}))))
    return specs


def start_ray(address: str | None) -> tuple[Any, bool]:
    """Ray, started here (a local one, or connected to ``address``) unless this process already did;
    returns ``(ray, owned)``: ``owned`` when this call started a local Ray that :meth:`close` should stop."""
    try:
        import ray
    except ImportError as exc:
        raise EditlensError("the Ray executor needs Ray: pip install 'editlens[ray]'") from exc
    if ray.is_initialized():
        return ray, False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address:
        kwargs["address"] = address
    ray.init(**kwargs)
    return ray, address is None


def default_workers(ray: Any, gpus_per_worker: float) -> int:
    """One worker per GPU of the cluster (with ``gpus_per_worker``), else one per CPU."""
    res = ray.cluster_resources()
    if gpus_per_worker:
        return max(1, int(res.get("GPU", 0) / gpus_per_worker))
    return max(1, int(res.get("CPU", 1)))


class RayExecutor:
    name = "ray"

    def __init__(self, evaluators: Sequence[Any], image_options: ImageLoadOptions, address: str | None = None,
                 num_workers: int | None = None, gpus_per_worker: float = 0.0) -> None:
        ray, self._owns_ray = start_ray(address)
        self.ray = ray
        if num_workers is None:
            num_workers = default_workers(ray, gpus_per_worker)
        actor = ray.remote(num_cpus=1, num_gpus=gpus_per_worker)(_BatchWorker)
        specs = evaluator_specs(evaluators)
        self.actors = [actor.remote(specs, image_options) for _ in range(max(1, num_workers))]

    def map(self, batches: Sequence[list[EditSample]], hashes: dict[str, str],
            done: dict[str, set[str]]) -> Iterator[tuple[list[EditSample], list[Row]]]:
        ray = self.ray
        queue = list(enumerate(batches))
        in_flight: dict[Any, int] = {}
        free = list(self.actors)
        busy: dict[Any, Any] = {}
        try:
            while queue or in_flight:
                while queue and free:
                    i, batch = queue.pop(0)
                    worker = free.pop()
                    ids = {s.id for s in batch}
                    sub_done = {k: v & ids for k, v in done.items()}
                    ref = worker.score.remote(batch, hashes, sub_done)
                    in_flight[ref] = i
                    busy[ref] = worker
                (ref,), _ = ray.wait(list(in_flight), num_returns=1)
                i = in_flight.pop(ref)
                free.append(busy.pop(ref))
                try:
                    rows = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if hasattr(exc, "cause") else None
                    if isinstance(cause, ModelUnavailableError):
                        raise cause from None
                    raise
                yield batches[i], rows
        finally:
            for ref in in_flight:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        if self._owns_ray:
            self.ray.shutdown()


# --- generation: editors on Ray workers -------------------------------------------------------------------------


class _EditWorker:
    """Body of a Ray actor: builds one editor (one pipeline, on the worker's GPU or CPU) once, then edits batches.

    An editor that cannot be built is kept as the error and raised by every call, so the driver
    reports it (missing weights, a bad option) instead of a bare "actor died"."""

    def __init__(self, spec: str, options: dict[str, Any]) -> None:
        from editlens.editors import create_editor

        self.error: BaseException | None = None
        try:
            self.editor = create_editor(spec, **options)
        except Exception as exc:  # noqa: BLE001  (re-raised, with its type, by every call)
            self.error = exc

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def info(self) -> dict[str, Any]:
        import os

        self._check()
        e = self.editor
        spec = getattr(e, "spec", None)
        return {"name": e.name, "spec": spec.to_dict() if spec is not None else None, "settings": e.settings(),
                "weights": e.weights(), "runtime": e.runtime(), "batch_size": e.batch_size, "pid": os.getpid()}

    def edit(self, requests: list[Any]) -> tuple[list[Any], float]:
        import time

        self._check()
        t0 = time.perf_counter()
        outputs = list(self.editor.edit_batch(requests))
        return outputs, time.perf_counter() - t0

    def close(self) -> None:
        if self.error is None:
            self.editor.close()


class RayEditors:
    """An editor spread over Ray workers: each worker holds one copy of the editor ``spec``
    (``editlens.editors.create_editor(spec, **options)``) on one GPU (``gpus_per_worker=1``)
    or on CPUs, and :meth:`edit_batches` hands each batch to the next free worker.

    It is an :class:`~editlens.editors.base.Editor` to :func:`~editlens.runner.edit.generate_edits`:
    name, settings, weights and runtime are the first worker's, so ``editor.json`` and the
    refusal of a resume with other settings are as with one process. The driver keeps the log,
    writes the images and the manifest; a batch's images are the same bytes as in one process
    computing the same way (the same requests, per-(edit, sample) seeds and batches; on a CPU the
    same threads per process: a worker computes with ``cpus_per_worker`` threads, and a sum split
    over other threads may round its last bit apart). A worker that dies
    (killed, out of memory, a lost node) is replaced and its batch is given to another worker;
    after ``max_tries`` deaths on one batch its images are *failed* (redone on rerun).
    """

    def __init__(self, spec: str, options: dict[str, Any] | None = None, *, address: str | None = None,
                 num_workers: int | None = None, gpus_per_worker: float = 0.0, cpus_per_worker: float = 1.0,
                 max_tries: int = 3) -> None:
        ray, self._owns_ray = start_ray(address)
        self.ray = ray
        self.spec_string, self.options = spec, dict(options or {})
        self.max_tries = max(1, int(max_tries))
        self._actor = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0)(_EditWorker)
        n = num_workers if num_workers is not None else default_workers(ray, gpus_per_worker)
        self.actors = [self._new() for _ in range(max(1, int(n)))]
        self.deaths = 0
        try:
            self._info = self._get(self.actors[0].info.remote())
        except BaseException:
            self.close()
            raise
        from editlens.editors.spec import EditorSpec

        self.name = self._info["name"]
        self.batch_size = int(self._info["batch_size"] or 1)
        sd = self._info["spec"]
        self.spec = (EditorSpec(sd["name"], sd["kind"], "", tuple(sd["needs"]), sd["description"], sd["defaults"],
                                sd["family"]) if sd else None)

    def _new(self) -> Any:
        return self._actor.remote(self.spec_string, self.options)

    def _get(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, EditlensError):
                raise cause from None
            raise

    def settings(self) -> dict[str, Any]:
        return dict(self._info["settings"])

    def weights(self) -> dict[str, Any]:
        return dict(self._info["weights"])

    def runtime(self) -> dict[str, Any]:
        return {**self._info["runtime"], "executor": "ray", "workers": len(self.actors)}

    def worker_pids(self) -> list[int]:
        """The process id of every worker (for tests and for finding a stuck one)."""
        return [int(self._get(a.info.remote())["pid"]) for a in self.actors]

    def edit_batch(self, requests: Sequence[Any]) -> list[Any]:
        return next(iter(self.edit_batches([list(requests)])))[1]

    def edit_batches(self, batches: Any) -> Iterator[tuple[list[Any], list[Any], float]]:
        """``(requests, outputs, seconds)`` per batch of ``batches`` (an iterable, read as workers
        get free, so the driver holds at most one batch per worker), in the order they finish."""
        from collections import deque

        from editlens.editors.base import EditOutput

        ray = self.ray
        source = iter(batches)
        retry: deque[tuple[list[Any], int]] = deque()
        free = list(self.actors)
        in_flight: dict[Any, tuple[Any, list[Any], int]] = {}
        exhausted = False
        try:
            while True:
                while free and (retry or not exhausted):
                    if retry:
                        requests, tries = retry.popleft()
                    else:
                        try:
                            requests, tries = list(next(source)), 0
                        except StopIteration:
                            exhausted = True
                            break
                    actor = free.pop(0)
                    in_flight[actor.edit.remote(requests)] = (actor, requests, tries)
                if not in_flight:
                    return
                (ref,), _ = ray.wait(list(in_flight), num_returns=1)
                actor, requests, tries = in_flight.pop(ref)
                try:
                    outputs, seconds = self._get(ref)
                except ray.exceptions.RayActorError as exc:  # the worker died: another one redoes its batch
                    self.deaths += 1
                    new = self._new()
                    self.actors[self.actors.index(actor)] = new
                    free.append(new)
                    if tries + 1 < self.max_tries:
                        retry.append((requests, tries + 1))
                        continue
                    why = f"the Ray worker died {tries + 1} times on this batch ({type(exc).__name__})"
                    yield requests, [EditOutput(error=why) for _ in requests], 0.0
                    continue
                free.append(actor)
                yield requests, outputs, seconds
        finally:
            for ref in in_flight:
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001  (finished or its worker gone)
                    pass

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            try:
                self.ray.kill(a)
            except Exception:  # noqa: BLE001  (already gone)
                pass
        if self._owns_ray:
            self.ray.shutdown()
