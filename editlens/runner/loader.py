"""Decoding and preprocessing that overlap scoring.

:class:`PrefetchExecutor` is the local executor with a loader thread pool
that works ``depth`` batches ahead of the batch being scored. For each
sample it decodes the images, hashes them (the embedding caches' keys) and
runs every evaluator's optional ``prepare(sample)``: per-sample work that
needs no model, such as the change map, which then waits in the sample for
the scoring pass. OpenCV, numpy and PIL release the GIL, so on a machine
with several cores this work runs beside model compute instead of before it.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterator, Sequence

from editlens.core.images import ImageLoadOptions
from editlens.core.types import EditSample, LoadedEdit
from editlens.runner.executors import LocalExecutor, Row, load_sample, score_batch


def prepare_sample(sample: EditSample, options: ImageLoadOptions, preparers: Sequence[tuple[str, Any]],
                   done: dict[str, set[str]]) -> LoadedEdit | str:
    """Decode ``sample`` and run the ``prepare`` hooks of the evaluators that
    still have to score it. A hook that fails is ignored here: scoring runs
    the same computation again and records the error in its own row."""
    loaded = load_sample(sample, options)
    if isinstance(loaded, LoadedEdit):
        loaded.source_hash, loaded.edited_hash  # noqa: B018  (cached on the sample)
        for name, prepare in preparers:
            if sample.id in done.get(name, ()):
                continue
            try:
                prepare(loaded)
            except Exception:  # noqa: BLE001,S110  (see docstring)
                pass
    return loaded


class PrefetchExecutor(LocalExecutor):
    """:class:`LocalExecutor` whose loader threads decode and prepare up to
    ``depth`` batches ahead of the one being scored."""

    name = "local"

    def __init__(self, evaluators: Sequence[Any], image_options: ImageLoadOptions, workers: int = 2,
                 depth: int = 2) -> None:
        super().__init__(evaluators, image_options, workers)
        self.pool.shutdown(wait=False)
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="editlens-loader")
        self.depth = max(1, depth)
        self.preparers = [(ev.name, ev.prepare) for ev in self.evaluators if getattr(ev, "has_prepare", False)]

    def map(self, batches: Sequence[list[EditSample]], hashes: dict[str, str],
            done: dict[str, set[str]]) -> Iterator[tuple[list[EditSample], list[Row]]]:
        def submit(batch: list[EditSample]) -> list[Future]:
            return [self.pool.submit(prepare_sample, s, self.image_options, self.preparers, done) for s in batch]

        ahead: deque[list[Future]] = deque()
        nxt = 0
        try:
            for batch in batches:
                while nxt < len(batches) and len(ahead) < self.depth:
                    ahead.append(submit(batches[nxt]))
                    nxt += 1
                loaded = [f.result() for f in ahead.popleft()]
                if nxt < len(batches):  # keep the loaders busy while this batch is scored
                    ahead.append(submit(batches[nxt]))
                    nxt += 1
                yield batch, score_batch(batch, loaded, self.evaluators, hashes, done)
        finally:
            for futures in ahead:
                for f in futures:
                    f.cancel()
