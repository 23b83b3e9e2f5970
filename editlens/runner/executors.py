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


class RayExecutor:
    name = "ray"

    def __init__(self, evaluators: Sequence[Any], image_options: ImageLoadOptions, address: str | None = None,
                 num_workers: int | None = None, gpus_per_worker: float = 0.0) -> None:
        try:
            import ray
        except ImportError as exc:
            raise EditlensError("the Ray executor needs Ray: pip install 'editlens[ray]'") from exc
        self.ray = ray
        self._owns_ray = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            ray.init(**kwargs)
            self._owns_ray = address is None
        if num_workers is None:
            res = ray.cluster_resources()
            num_workers = int(res.get("GPU", 0)) if gpus_per_worker else max(1, int(res.get("CPU", 1)))
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
