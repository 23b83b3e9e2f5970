"""The run loop: resume, crash safety, settings changes, failures as data, exports."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from editlens.core.types import EditSample
from editlens.metrics.registry import create_metric
from editlens.runner.run import run_evaluation
from editlens.runner.store import ResultsStore, export


def _dataset(tmp_path, n=12, broken=()):
    d = tmp_path / "imgs"
    d.mkdir(exist_ok=True)
    samples = []
    for i in range(n):
        rng = np.random.default_rng(i)
        src = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
        edt = src.copy()
        edt[: i + 1] = 255
        Image.fromarray(src).save(d / f"s{i}.png")
        Image.fromarray(edt).save(d / f"e{i}.png")
        edited = d / ("missing.png" if i in broken else f"e{i}.png")
        samples.append(EditSample(f"id{i:03d}", str(d / f"s{i}.png"), str(edited), f"edit {i}",
                                  model="A" if i % 2 else "B"))
    return samples


def test_rerun_reuses_everything(tmp_path):
    samples = _dataset(tmp_path)
    metrics = [create_metric("l1"), create_metric("psnr")]
    first = run_evaluation(samples, metrics, tmp_path / "run", batch_size=5, progress=False)
    assert first.computed == 24 and first.reused == 0
    second = run_evaluation(samples, metrics, tmp_path / "run", batch_size=5, progress=False)
    assert second.computed == 0 and second.reused == 24
    lines = [json.loads(x) for x in open(tmp_path / "run" / "results.jsonl")]
    assert [r["id"] for r in lines] == [s.id for s in samples]
    assert lines[0]["scores"]["l1"]["value"] == pytest.approx(
        np.abs(np.asarray(Image.open(samples[0].source), float) - np.asarray(Image.open(samples[0].edited), float)).mean() / 255)


def test_settings_change_recomputes_only_that_metric(tmp_path):
    samples = _dataset(tmp_path)
    run_evaluation(samples, [create_metric("l1"), create_metric("ssim")], tmp_path / "run", progress=False)
    res = run_evaluation(samples, [create_metric("l1"), create_metric("ssim", region="outside")],
                         tmp_path / "run", progress=False)
    assert res.reused == 12 and res.computed == 12  # only ssim's 12 rows are new
    # the new ssim setting needs a mask: every sample says so rather than inventing a number
    assert res.summary["counts"]["ssim"]["skipped"] == 12


def test_failures_are_recorded_and_run_continues(tmp_path):
    samples = _dataset(tmp_path, n=6, broken={2})
    res = run_evaluation(samples, [create_metric("l1")], tmp_path / "run", progress=False)
    assert res.summary["counts"]["l1"] == {"scored": 5, "skipped": 0, "unscored": 0, "failed": 1, "info": 0}
    from editlens.reporting.runs import failures

    (f,) = failures(tmp_path / "run")
    assert f["sample_id"] == "id002" and "missing.png: file not found" in f["reason"]


def test_manifest_contents(tmp_path):
    samples = _dataset(tmp_path, n=3)
    run_evaluation(samples, [create_metric("l1", region="all")], tmp_path / "run", progress=False, command=["x"])
    m = json.load(open(tmp_path / "run" / "manifest.json"))
    assert m["environment"]["editlens"] == "0.1.0" and m["environment"]["libraries"]["torch"]
    assert m["evaluators"][0]["name"] == "l1" and m["evaluators"][0]["options"]["region"] == "all"
    assert len(m["evaluators"][0]["config_hash"]) == 16
    assert m["counts"]["l1"]["scored"] == 3 and m["finished"] and m["command"] == ["x"]


def test_exports_are_atomic_and_complete(tmp_path):
    samples = _dataset(tmp_path, n=4)
    run_evaluation(samples, [create_metric("l1")], tmp_path / "run", progress=False)
    store = ResultsStore(tmp_path / "run")
    rows = store.rows()
    for fmt in ("jsonl", "csv", "parquet"):
        p = export(rows, tmp_path / "run" / f"out.{fmt}")
        assert p.exists()
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "run" / "out.parquet").num_rows == 4
    assert not list((tmp_path / "run").glob(".*.tmp"))  # no temp files left behind

    class Boom(Exception):
        pass

    def broken(fh):
        fh.write("partial")
        raise Boom

    from editlens.core.io import atomic_write

    (tmp_path / "keep.txt").write_text("old")
    with pytest.raises(Boom):
        atomic_write(tmp_path / "keep.txt", broken)
    assert (tmp_path / "keep.txt").read_text() == "old"


SCRIPT = textwrap.dedent("""
    import os, signal, sys, json
    sys.path.insert(0, {tests!r})
    from test_runner import _dataset
    from pathlib import Path
    from editlens.metrics.registry import create_metric
    from editlens.runner.run import run_evaluation

    class KillOnCall:
        def __init__(self, inner, kill_at):
            self.inner, self.kill_at, self.calls, self.name = inner, kill_at, 0, inner.name
        def describe(self):
            return self.inner.describe()
        def score_batch(self, batch):
            self.calls += 1
            if self.calls == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # dies mid-batch, nothing of it written
            return self.inner.score_batch(batch)

    tmp = Path({tmp!r})
    kill_at = int(sys.argv[1])
    ev = create_metric("l1")
    if kill_at:
        ev = KillOnCall(ev, kill_at)
    res = run_evaluation(_dataset(tmp, n=20), [ev], tmp / "run", batch_size=4, progress=False)
    print(json.dumps({{"computed": res.computed, "reused": res.reused}}))
""")


def test_sigkill_mid_batch_then_resume(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(tests=os.path.dirname(__file__), tmp=str(tmp_path)))
    killed = subprocess.run([sys.executable, str(script), "3"], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL
    store = ResultsStore(tmp_path / "run")
    assert store.count() == 8  # two whole batches survived, the third was in flight
    store.close()
    resumed = subprocess.run([sys.executable, str(script), "0"], capture_output=True, text=True, check=True)
    assert json.loads(resumed.stdout.strip().splitlines()[-1]) == {"computed": 12, "reused": 8}
    store = ResultsStore(tmp_path / "run")
    ids = [r["sample_id"] for r in store.rows()]
    assert sorted(ids) == [f"id{i:03d}" for i in range(20)]  # nothing lost, nothing twice


def test_interrupt_stops_after_current_batch(tmp_path):
    samples = _dataset(tmp_path, n=12)
    res = run_evaluation(samples, [create_metric("l1")], tmp_path / "run", batch_size=4, progress=False,
                         on_batch=lambda i: os.kill(os.getpid(), signal.SIGINT) if i == 0 else None)
    assert res.interrupted and res.computed == 4
    again = run_evaluation(samples, [create_metric("l1")], tmp_path / "run", batch_size=4, progress=False)
    assert again.computed == 8 and again.reused == 4 and not again.interrupted


def test_corrupt_store_gives_clear_error(tmp_path):
    from editlens.errors import EditlensError

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(EditlensError, match="results store cannot be opened"):
        ResultsStore(tmp_path / "run")


def test_edits_of_one_source_share_batches(tmp_path):
    """A comparison manifest lists editor A's edits, then editor B's: the run
    batches each source's edits together (so encoders see the repeat), and
    exports keep the manifest's order."""
    base = _dataset(tmp_path, n=4)
    samples = [EditSample(f"{m}{i}", s.source, s.edited, "edit", model=m) for m in "AB" for i, s in enumerate(base)]

    class Recorder:
        name = "recorder"

        def __init__(self):
            self.inner, self.batches = create_metric("l1"), []

        def describe(self):
            return {**self.inner.describe(), "name": "recorder"}

        def score_batch(self, batch):
            self.batches.append([s.id for s in batch])
            return self.inner.score_batch(batch)

    rec = Recorder()
    run_evaluation(samples, [rec], tmp_path / "run", batch_size=2, progress=False)
    assert rec.batches == [["A0", "B0"], ["A1", "B1"], ["A2", "B2"], ["A3", "B3"]]
    rows = [json.loads(x) for x in open(tmp_path / "run" / "results.jsonl")]
    assert [r["id"] for r in rows] == [s.id for s in samples]


def test_the_lock_record_is_read_by_the_lock_module_only(tmp_path):
    """The reports tell a crashed run from a running one through runner.lock, which owns the file's format."""
    import os

    from editlens.runner.lock import RunLock, holder_alive, read_holder

    assert read_holder(tmp_path) == {} and holder_alive(tmp_path) is None
    with RunLock(tmp_path):
        assert read_holder(tmp_path)["pid"] == os.getpid() and holder_alive(tmp_path) is True
    (tmp_path / ".lock").write_text('{"pid": 2147483646, "host": null}')  # no such process
    assert holder_alive(tmp_path) is False
    (tmp_path / ".lock").write_text("not json")
    assert read_holder(tmp_path) == {} and holder_alive(tmp_path) is None
    from pathlib import Path

    pkg = Path(__file__).resolve().parents[1] / "editlens"
    readers = [p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py") if '".lock"' in p.read_text()]
    assert readers == ["runner/lock.py"]
