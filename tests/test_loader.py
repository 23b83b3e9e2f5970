"""The prefetching loader: decoding and model-free preparation run in loader
threads ahead of scoring, with results identical to scoring alone."""

import threading

import numpy as np
from helpers import rng_image

from editlens.core.images import ImageLoadOptions
from editlens.core.types import EditSample
from editlens.metrics.changemap import sample_change_map
from editlens.metrics.registry import create_metric
from editlens.runner.executors import LocalExecutor
from editlens.runner.loader import PrefetchExecutor
from editlens.runner.run import run_evaluation


def _samples(n=7):
    out = []
    for i in range(n):
        a = rng_image(i, 64, 64)
        b = a.copy()
        b[10 + i : 30 + i, 20:40] = (250, 10, 10)
        out.append(EditSample(f"s{i}", a, b, "paint a red square"))
    return out


def _rows(executor, samples, metrics, batch=3):
    hashes = {m.name: "h" for m in metrics}
    done = {m.name: set() for m in metrics}
    batches = [samples[i : i + batch] for i in range(0, len(samples), batch)]
    try:
        return [r for _, rows in executor.map(batches, hashes, done) for r in rows]
    finally:
        executor.close()


def test_same_rows_as_the_plain_executor_and_prepared_in_loader_threads():
    metrics = [create_metric("change_map"), create_metric("ssim")]
    cm = metrics[0]
    threads = []
    original = cm.prepare

    def spy(sample):
        threads.append(threading.current_thread().name)
        original(sample)

    cm.prepare = spy
    opts = ImageLoadOptions()
    plain = _rows(LocalExecutor(metrics, opts, 2), _samples(), metrics)
    fast = _rows(PrefetchExecutor(metrics, opts, 2, depth=2), _samples(), metrics)
    key = lambda r: (r[0], r[1])  # noqa: E731
    assert [(r[0], r[1], r[4].value) for r in sorted(plain, key=key)] == \
           [(r[0], r[1], r[4].value) for r in sorted(fast, key=key)]
    assert [r[4].details["regions"] for r in sorted(plain, key=key) if r[1] == "change_map"] == \
           [r[4].details["regions"] for r in sorted(fast, key=key) if r[1] == "change_map"]
    assert len(threads) == 7 and all(t.startswith("editlens-loader") for t in threads)


def test_prepared_map_is_the_one_scored():
    metric = create_metric("change_map")
    s = _samples(1)[0].load()
    metric.prepare(s)
    cached = sample_change_map(s, metric.params)
    assert sample_change_map(s, metric.params) is cached  # computed once, found again by compute
    assert metric([s])[0].value == cached.changed_fraction


def test_done_samples_are_not_prepared_and_failures_still_reported(tmp_path):
    metrics = [create_metric("change_map")]
    calls = []
    metrics[0].prepare = lambda s: calls.append(s.id)
    samples = _samples(4) + [EditSample("bad", str(tmp_path / "missing.png"), str(tmp_path / "x.png"), "i")]
    ex = PrefetchExecutor(metrics, ImageLoadOptions(), 2)
    done = {"change_map": {"s0", "s1"}}
    rows = [r for _, rr in ex.map([samples[:3], samples[3:]], {"change_map": "h"}, done) for r in rr]
    ex.close()
    assert sorted(calls) == ["s2", "s3"]
    bad = [r for r in rows if r[0] == "bad"]
    assert bad and bad[0][4].status == "failed" and "missing.png" in bad[0][4].reason


def test_run_evaluation_uses_the_prefetching_loader(tmp_path):
    res = run_evaluation(_samples(5), [create_metric("change_map")], tmp_path / "run", batch_size=2, progress=False)
    assert res.computed == 5
    assert np.isfinite(res.summary["means"]["change_map"])


def test_embedding_prefetch_is_used_and_values_unchanged(tiny_clip_dir):
    from editlens.models.pool import clear

    models = {"clip": str(tiny_clip_dir)}
    plain = [s.value for s in create_metric("clip_i", models=models)([s.load() for s in _samples(3)])]
    clear("clip")
    metric = create_metric("clip_i", models=models)
    loaded = [s.load() for s in _samples(3)]
    for s in loaded:
        metric.prepare(s)
    assert len(metric.encoder._ready) == 6  # 3 sources + 3 edited images, preprocessed
    got = [s.value for s in metric(loaded)]
    assert len(metric.encoder._ready) == 0  # consumed by the forward pass
    np.testing.assert_allclose(got, plain, atol=1e-6)
