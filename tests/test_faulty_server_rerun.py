"""Fault injection: a misbehaving OpenAI-compatible server drives `score` and
`run`; every edit ends scored, unscored with its raw text, or failed with a
reason, and after the server is fixed a rerun completes exactly the failed ones."""

import json
import os
import sqlite3
import stat
import threading
import time

import pytest
from fake_openai import CASES, FakeServer
from helpers import rng_image
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.core.types import EditSample, Score
from editlens.errors import EditlensError
from editlens.metrics.registry import create_metric
from editlens.runner.run import run_evaluation
from editlens.runner.store import ResultsStore

runner = CliRunner()

EXPECTED_REASON = {"429": "HTTP 429", "500": "HTTP 500", "reset": "gave up", "hang": "Timeout",
                   "empty_choices": "without choices", "empty_content": "empty content", "null_content": "null content", "garbage": "not JSON", "truncated": "not JSON",
                   "array": "JSON list"}
FAST = ["--timeout", "0.5", "--max-retries", "1", "--concurrency", "8"]


def _manifest(tmp_path, cases=CASES):
    d = tmp_path / "imgs"
    d.mkdir(exist_ok=True)
    rows = []
    for i, case in enumerate(cases):
        Image.fromarray(rng_image(2 * i, 24, 24)).save(d / f"{case}_s.png")
        Image.fromarray(rng_image(2 * i + 1, 24, 24)).save(d / f"{case}_e.png")
        rows.append({"id": case, "source": f"imgs/{case}_s.png", "edited": f"imgs/{case}_e.png",
                     "instruction": f"case:{case} add a hat"})
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(manifest, out, url, cache, *extra):
    args = ["run", str(manifest), "--out", str(out), "--metrics", "l1", "--judge", "viescore", "--vlm", url,
            "--cache", str(cache), "--no-progress", "--batch-size", "4", *FAST, *extra]
    return runner.invoke(app, args, catch_exceptions=False)


def _results(out):
    return {r["id"]: r["scores"]["viescore"] for r in map(json.loads, open(out / "results.jsonl"))}


def test_run_against_faulty_server_then_rerun_completes_exactly_the_failed(tmp_path):
    manifest = _manifest(tmp_path)
    fake = FakeServer(max_hang=2.0)
    with fake.running() as url:
        first = _run(manifest, tmp_path / "run", url, tmp_path / "c.sqlite")
        # finished with failed rows: exit status 3, the count and the command that lists them
        assert first.exit_code == 3, first.output
        assert "10 result(s) failed" in first.output and "runs failures" in first.output and "--status failed" in first.output
        res = _results(tmp_path / "run")
        assert res["ok"]["status"] == "scored" and res["ok"]["value"] == pytest.approx((7 * 7) ** 0.5 / 10)
        assert res["unparsable"]["status"] == "unscored"
        assert res["unparsable"]["details"]["raw"]["SC"] == "It looks fine to me."
        for case, needle in EXPECTED_REASON.items():  # transport faults are failed, with the reason
            assert res[case]["status"] == "failed", (case, res[case])
            assert needle in res[case]["reason"], (case, res[case]["reason"])
            assert res[case].get("value") is None

        # the server is fixed: nothing is redone with --no-retry-failed ...
        fake.broken = False
        fake.requests.clear()
        kept = _run(manifest, tmp_path / "run", url, tmp_path / "c.sqlite", "--no-retry-failed", "--allow-failures")
        assert kept.exit_code == 0 and fake.requests == []
        # ... and by default a rerun asks exactly the requests that failed, once each
        again = _run(manifest, tmp_path / "run", url, tmp_path / "c.sqlite")
        assert again.exit_code == 0, again.output
        assert sorted(fake.requests) == sorted(EXPECTED_REASON)  # PQ answers and good SC answers came from the cache
        res = _results(tmp_path / "run")
        assert all(res[c]["status"] == "scored" for c in EXPECTED_REASON)
        assert res["unparsable"]["status"] == "unscored"  # a real answer is kept ...
        fake.requests.clear()
        retried = _run(manifest, tmp_path / "run", url, tmp_path / "c.sqlite", "--retry-unscored", "--cache", "none")
        # ... unless asked: only that edit's two prompts (SC, and PQ which has no case marker) are asked again
        assert retried.exit_code == 0 and sorted(fake.requests) == ["ok", "unparsable"]
        assert _results(tmp_path / "run")["unparsable"]["status"] == "scored"


def _score(url, tmp_path, case, *extra):
    (src,) = [p for p in [tmp_path / "s.png"]]
    Image.fromarray(rng_image(0, 24, 24)).save(src)
    Image.fromarray(rng_image(1, 24, 24)).save(tmp_path / "e.png")
    res = runner.invoke(app, ["score", "--source", str(src), "--edited", str(tmp_path / "e.png"),
                              "--instruction", f"case:{case} add a hat", "--metrics", "l1", "--judge", "viescore",
                              "--vlm", url, "--cache", "none", "--json", *FAST, *extra], catch_exceptions=False)
    assert res.exit_code in (0, 3), res.output
    scores = json.loads(res.stdout)["scores"]
    # exit status 3 exactly when a score failed (after printing everything)
    assert (res.exit_code == 3) == any(v["status"] == "failed" for v in scores.values()), res.output
    return scores


@pytest.mark.parametrize("case", ["500", "array", "truncated", "unparsable"])
def test_score_against_faulty_server(tmp_path, case):
    with FakeServer(max_hang=1.0).running() as url:
        scores = _score(url, tmp_path, case)
    assert scores["l1"]["status"] == "scored"  # the judge's fault does not touch other metrics
    v = scores["viescore"]
    if case == "unparsable":
        assert v["status"] == "unscored" and v["details"]["raw"]["SC"] == "It looks fine to me."
    else:
        assert v["status"] == "failed" and EXPECTED_REASON[case] in v["reason"] and v["value"] is None


def test_url_without_v1_is_found(tmp_path):
    with FakeServer().running() as url:
        scores = _score(url[: -len("/v1")], tmp_path, "ok")
    assert scores["viescore"]["status"] == "scored"


def test_garbage_is_not_cached_as_an_answer(tmp_path):
    from editlens.backends.cache import CachedBackend, ResponseCache
    from editlens.backends.http import OpenAIBackend
    from editlens.backends.types import ChatRequest, Message

    fake = FakeServer()
    with fake.running() as url:
        be = CachedBackend(OpenAIBackend(url, max_retries=0, timeout=1), ResponseCache(tmp_path / "c.sqlite"))
        reqs = [ChatRequest([Message("user", [f"case:{c}"])]) for c in ("garbage", "array", "empty_choices")]
        assert be.revision == '{"owned_by": "tests", "root": "fake-v1"}'  # what the server serves keys the cache
        assert all(g.error for g in be.generate(reqs))
        assert len(be.cache) == 0
        fake.broken = False
        assert all(g.text and not g.cached for g in be.generate(reqs))


# -- one bad sample never fails its batch -------------------------------------------------------

class _Picky:
    """Raises on any batch holding the sample whose instruction is 'bad'."""

    name = "picky"

    def __init__(self):
        self.calls = 0

    def describe(self):
        return {"name": self.name}

    def score_batch(self, batch):
        self.calls += 1
        if any(s.instruction == "bad" for s in batch):
            raise ValueError("cannot score an instruction of 'bad'")
        return [Score(self.name, float(len(s.instruction))) for s in batch]


def _samples(tmp_path, instructions):
    out = []
    for i, text in enumerate(instructions):
        Image.fromarray(rng_image(i, 16, 16)).save(tmp_path / f"{i}.png")
        out.append(EditSample(f"id{i}", str(tmp_path / f"{i}.png"), str(tmp_path / f"{i}.png"), text))
    return out


def test_one_bad_sample_fails_alone(tmp_path):
    samples = _samples(tmp_path, ["add a hat", "bad", "remove it", "x"])
    res = run_evaluation(samples, [_Picky(), create_metric("l1")], tmp_path / "run", batch_size=4, progress=False)
    assert res.summary["counts"]["picky"] == {"scored": 3, "skipped": 0, "unscored": 0, "failed": 1, "info": 0}
    rows = {r["sample_id"]: r for r in ResultsStore(tmp_path / "run").rows() if r["evaluator"] == "picky"}
    assert rows["id1"]["status"] == "failed" and "instruction of 'bad'" in rows["id1"]["reason"]
    assert rows["id0"]["value"] == len("add a hat") and rows["id3"]["value"] == 1.0


# -- the run directory lock ---------------------------------------------------------------------

def test_second_run_on_same_out_is_refused_then_can_wait(tmp_path):
    from editlens.runner.lock import RunLock

    samples = _samples(tmp_path, ["a", "b"])
    holder = RunLock(tmp_path / "run").acquire()
    try:
        with pytest.raises(EditlensError, match=f"process {os.getpid()} on .* is running in this run directory"):
            run_evaluation(samples, [create_metric("l1")], tmp_path / "run", progress=False)
        assert not (tmp_path / "run" / "results.sqlite").exists()  # nothing was done twice
        threading.Timer(0.4, holder.release).start()
        t0 = time.monotonic()
        res = run_evaluation(samples, [create_metric("l1")], tmp_path / "run", progress=False, wait=True)
        assert res.computed == 2 and time.monotonic() - t0 >= 0.3
    finally:
        holder.release()


def test_cli_run_names_the_holder_and_exits_nonzero(tmp_path):
    from editlens.runner.lock import RunLock

    manifest = _manifest(tmp_path, cases=("ok",))
    with RunLock(tmp_path / "run"):
        res = runner.invoke(app, ["run", str(manifest), "--out", str(tmp_path / "run"), "--metrics", "l1",
                                  "--no-progress"])
    assert res.exit_code == 2 and f"process {os.getpid()}" in res.output and "--wait" in res.output


HOLDER = """
import select, sys
from editlens.runner.lock import RunLock
with RunLock(sys.argv[1]):
    print("held", flush=True)
    select.select([sys.stdin], [], [], 60)  # until the test says so (at most a minute)
"""


def test_two_processes_on_one_run_directory(tmp_path):
    import subprocess
    import sys

    from helpers import REPO

    manifest = _manifest(tmp_path, cases=("ok",))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "run")], stdout=subprocess.PIPE,
                              stdin=subprocess.PIPE, text=True, env=env)

    def release():
        holder.stdin.write("done\n")
        holder.stdin.flush()

    try:
        assert holder.stdout.readline().strip() == "held"
        res = runner.invoke(app, ["run", str(manifest), "--out", str(tmp_path / "run"), "--metrics", "l1",
                                  "--no-progress"])
        assert res.exit_code == 2 and f"process {holder.pid} on" in res.output
        threading.Timer(1.0, release).start()
        queued = runner.invoke(app, ["run", str(manifest), "--out", str(tmp_path / "run"), "--metrics", "l1",
                                     "--no-progress", "--wait"])
        assert queued.exit_code == 0 and "1 results computed" in queued.output
        assert f"waiting for process {holder.pid}" in queued.output
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)


# -- results store ------------------------------------------------------------------------------

def test_busy_store_says_locked_not_no_transaction(tmp_path):
    store = ResultsStore(tmp_path / "run", timeout=0.1)
    other = sqlite3.connect(tmp_path / "run" / "results.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(EditlensError, match="results store is busy .*locked") as info:
            store.write([("a", "l1", "h", None, Score("l1", 0.5))])
        assert "no transaction" not in str(info.value)
    finally:
        other.execute("ROLLBACK")
    assert store.write([("a", "l1", "h", None, Score("l1", 0.5))]) == 1  # usable again


def test_outputs_show_every_metric_and_are_readable(tmp_path):
    samples = _samples(tmp_path, ["a", "b", "c"])
    run_evaluation(samples, [create_metric("l1")], tmp_path / "run", progress=False)
    run_evaluation(samples, [create_metric("psnr")], tmp_path / "run", progress=False)
    rec = [json.loads(x) for x in open(tmp_path / "run" / "results.jsonl")]
    assert all(set(r["scores"]) == {"l1", "psnr"} for r in rec)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(summary["counts"]) == {"l1", "psnr"}
    umask = os.umask(0)
    os.umask(umask)
    for name in ("results.jsonl", "summary.json", "manifest.json"):
        mode = stat.S_IMODE(os.stat(tmp_path / "run" / name).st_mode)
        assert mode == 0o666 & ~umask, (name, oct(mode))
    res = runner.invoke(app, ["runs", "summary", str(tmp_path / "run")])
    assert "l1" in res.output and "psnr" in res.output


def test_runs_summary_says_when_everything_is_skipped(tmp_path):
    samples = _samples(tmp_path, ["a", "b"])
    run_evaluation(samples, [create_metric("ssim", region="outside")], tmp_path / "run", progress=False)
    res = runner.invoke(app, ["runs", "summary", str(tmp_path / "run")])
    assert res.exit_code == 0
    assert "ssim" in res.output and "no scored value: 2 skipped" in res.output
