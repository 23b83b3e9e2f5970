"""Failure modes of clients and servers: nothing lost, nothing hidden, nobody stalled.

Real sockets throughout: a switchable fake OpenAI-compatible server
(tests/fake_openai.py) for the clients' side, and `editlens serve` on a tiny
random model for the server's. Servers bind 127.0.0.1 and stop by
themselves; every wait is bounded. (Also pinned elsewhere: null answers and
the exit status of failed rows in test_faulty_server_rerun.py, hostile JSON in
test_serve_limits.py.)
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import httpx
import pytest
from fake_openai import FakeServer, wait_until
from helpers import REPO, rng_image, shared_path
from PIL import Image
from scripted import ScriptedBackend
from typer.testing import CliRunner

from editlens.backends.types import Generation
from editlens.cli.main import app

runner = CliRunner()
FAST = ["--timeout", "2", "--max-retries", "0", "--concurrency", "8", "--no-progress"]
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def _manifest(tmp_path, instructions, name="m.jsonl", extra=None):
    rows = []
    for i, text in enumerate(instructions):
        Image.fromarray(rng_image(2 * i, 24, 32)).save(tmp_path / f"s{i}.png")
        Image.fromarray(rng_image(2 * i + 1, 24, 32)).save(tmp_path / f"e{i}.png")
        rows.append({"id": f"r{i}", "source": f"s{i}.png", "edited": f"e{i}.png", "instruction": text,
                     **((extra or {}).get(i, {}))})
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- 1. a sample lost to the transport fails its row; the rest is reused -------------------------

def test_lost_sample_fails_the_row_and_a_rerun_asks_only_it(tmp_path):
    m = _manifest(tmp_path, ["case:lose_seed1 add a hat", "case:ok add a hat"])
    fake = FakeServer()
    args = ["run", m, "--out", tmp_path / "run", "--metrics", "l1", "--judge", "viescore", "--samples", "3",
            "--temperature", "0.5", "--cache", tmp_path / "c.sqlite", *FAST]
    with fake.running() as url:
        first = _cli(*args, "--vlm", url)
        assert first.exit_code == 3 and "1 result(s) failed" in first.output, first.output
        rows = {json.loads(x)["id"]: json.loads(x)["scores"]["viescore"] for x in open(tmp_path / "run" / "results.jsonl")}
        lost = rows["r0"]
        # never a score from 2 of the 3 answers asked for: failed, with what was lost
        assert lost["status"] == "failed" and lost["value"] is None
        assert "1 of 3 sampled requests lost" in lost["reason"] and lost["details"]["failed_samples"] == 1
        assert rows["r1"]["status"] == "scored" and rows["r1"]["details"]["parsed_samples"] == 3
        listed = _cli("runs", "failures", tmp_path / "run", "--status", "failed", "--json")
        assert [(r["sample_id"], r["status"]) for r in json.loads(listed.stdout)] == [("r0", "failed")]

        fake.broken = False
        fake.requests.clear()
        fake.bodies.clear()
        again = _cli(*args, "--vlm", url)
        assert again.exit_code == 0, again.output
        # exactly the lost request: the other samples (and the PQ answers) come from the cache
        assert fake.requests == ["lose_seed1"] and fake.bodies[0]["seed"] == 1
    row = {json.loads(x)["id"]: json.loads(x)["scores"]["viescore"] for x in open(tmp_path / "run" / "results.jsonl")}
    assert row["r0"]["status"] == "scored" and row["r0"]["details"]["parsed_samples"] == 3


def test_every_sample_lost_is_failed_and_min_samples_decides_the_rest():
    from editlens.judges.ensemble import Outcome, combine

    lost = Outcome(None, problem="backend error: HTTP 503")
    bad = Outcome(None, problem="no score list", raw="hmm")
    good = [Outcome(0.8), Outcome(0.6)]
    assert combine("j", [lost, lost, lost]).status == "failed"
    assert combine("j", [good[0], bad, lost]).status == "failed"  # a lost sample outranks an unparsable one
    strict = combine("j", [*good, bad])
    assert strict.status == "unscored" and "only 2 of 3" in strict.reason and strict.details["raw"][2] == "hmm"
    loose = combine("j", [*good, bad], min_samples=2)
    assert loose.status == "scored" and loose.value == pytest.approx(0.7) and loose.details["parsed_samples"] == 2


def test_min_samples_option_is_checked_before_any_model_loads(tmp_path):
    m = _manifest(tmp_path, ["add a hat"])
    res = _cli("run", m, "--out", tmp_path / "run", "--judge", "yes_no", "--vlm", "http://127.0.0.1:9/v1",
               "--samples", "3", "--temperature", "0.5", "--min-samples", "4")
    assert res.exit_code == 2 and "min_samples (--min-samples) must be a whole number from 1 to samples (3)" in res.output


def test_pairwise_with_a_lost_sample_exits_3(tmp_path):
    img = tmp_path / "a.png"
    Image.fromarray(rng_image(0, 24, 24)).save(img)
    with FakeServer().running() as url:
        res = _cli("compare", "--source", img, "--edited-a", img, "--edited-b", img, "--instruction",
                   "case:lose_seed1 add a hat", "--vlm", url, "--cache", "none", "--samples", "3",
                   "--temperature", "0.5", "--json", *FAST[:-1])
    doc = json.loads(res.stdout)
    assert res.exit_code == 3 and doc["verdict"] is None and "1 of 3 sampled requests lost" in doc["reason"]


# -- 5. an answer that only restates the scale is unscored --------------------------------------

@pytest.mark.parametrize("answer,scale", [
    ("[0, 10]", (0, 10)), ('{"score": "[0, 10]"}', (0, 10)), ('{"score": [0, 10]}', (0, 10)),
    ('```json\n{"score": "[0, 10]", "reasoning": ""}\n```', (0, 10)), ("score: [0.0, 10.0]", (0, 10)),
    ('"[0, 10]"', (0, 10)), ("[0, 25]", (0, 25)), ('{"scores": "[1, 5]"}', (1, 5)),
])
def test_scale_echoes_are_unscored(answer, scale):
    from editlens.judges.parsing import read_scores

    scores, _, problem = read_scores(answer, 2, *scale)
    assert scores is None and f"only restates the scale [{scale[0]}, {scale[1]}]" in problem


@pytest.mark.parametrize("answer,expected", [
    ('{"reasoning": "Nothing was added; the rest is untouched.", "score": [0, 10]}', [0.0, 10.0]),
    ("The hat is missing, nothing else changed. score: [0, 10]", [0.0, 10.0]),
    ("[7, 8]", [7.0, 8.0]),
])
def test_bounds_with_a_judgement_are_scores(answer, expected):
    from editlens.judges.parsing import read_scores

    assert read_scores(answer)[0] == expected


def test_viescore_scale_echo_from_a_server_is_unscored(tmp_path):
    Image.fromarray(rng_image(0, 24, 24)).save(tmp_path / "s.png")
    with FakeServer().running() as url:
        res = _cli("score", "--source", tmp_path / "s.png", "--edited", tmp_path / "s.png", "--instruction",
                   "case:echo add a hat", "--metrics", "l1", "--judge", "viescore", "--vlm", url, "--cache", "none",
                   "--json", *FAST[:-1])
    v = json.loads(res.stdout)["scores"]["viescore"]
    assert res.exit_code == 0 and v["status"] == "unscored" and v["value"] is None
    assert "restates the scale" in v["reason"] and v["details"]["raw"]["SC"] == "[0, 10]"


# -- 4. whole datasets in ------------------------------------------------------------------------

def test_rows_without_ids_get_line_ids_next_to_rows_with_ids(tmp_path):
    from editlens.data.manifest import read_manifest

    m = _manifest(tmp_path, ["a", "b", "c", "d"])
    rows = [json.loads(x) for x in m.read_text().splitlines()]
    del rows[1]["id"], rows[3]["id"]
    rows[2]["id"] = "  "  # blank: no id either
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [s.id for s in read_manifest(m).samples] == ["r0", "line-2", "line-3", "line-4"]


def test_duplicate_ids_are_refused_naming_both_lines(tmp_path):
    from editlens.data.manifest import read_manifest
    from editlens.errors import ManifestError

    m = _manifest(tmp_path, ["a", "b", "c", "d"])
    rows = [json.loads(x) for x in m.read_text().splitlines()]
    rows[2]["id"] = "r0"  # the same id twice
    rows[1]["id"] = "line-4"  # the id line 4 would get
    del rows[3]["id"]
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for skip in (False, True):  # ids key the results: --skip-invalid drops neither row silently
        with pytest.raises(ManifestError) as err:
            read_manifest(m, skip_invalid=skip)
        assert dict(err.value.problems) == {3: "duplicate id 'r0' on lines 1 and 3",
                                            4: "duplicate id 'line-4' on lines 2 and 4"}
    res = _cli("run", m, "--out", tmp_path / "run", "--metrics", "l1", "--skip-invalid", "--no-progress")
    assert res.exit_code == 2 and "lines 1 and 3" in res.output and "Traceback" not in res.output


def test_semicolon_csv_gets_the_right_hint_and_delimiter_reads_it(tmp_path):
    from editlens.data.manifest import read_manifest

    _manifest(tmp_path, ["a"])
    m = tmp_path / "m.csv"
    m.write_text("id;source;edited;instruction\nx;s0.png;e0.png;add a hat\n")
    res = _cli("run", m, "--out", tmp_path / "run", "--metrics", "l1", "--no-progress")
    assert res.exit_code == 2 and "looks semicolon-separated" in res.output and "--delimiter ';'" in res.output
    assert [s.instruction for s in read_manifest(m, delimiter=";").samples] == ["add a hat"]


@pytest.mark.integration
def test_aurora_edits_jsonl_scores_every_real_triple(tmp_path):
    edits = shared_path("data", "aurora", "edits.jsonl")
    n = sum(1 for line in open(edits) if line.strip())
    res = _cli("run", edits, "--out", tmp_path / "run", "--columns", "source=input,edited=output", "--skip-invalid",
               "--metrics", "l1", "--no-progress", "--batch-size", "32")
    assert res.exit_code == 0, res.output
    counts = json.loads((tmp_path / "run" / "summary.json").read_text())["counts"]["l1"]
    assert counts["scored"] == n == 150 and "skipped" not in res.output.split("->")[0]


# -- 7. boxes are checked, never silently repaired -----------------------------------------------

def test_reversed_and_off_image_boxes_are_invalid_rows_unless_clipping_is_asked(tmp_path):
    m = _manifest(tmp_path, ["a", "b", "c"], extra={0: {"boxes": [[0.5, 0.5, 0.2, 0.9]]},
                                                     1: {"boxes": [[0, 0, 5000, 5000]]},
                                                     2: {"boxes": [[4, 4, 16, 12]]}})
    res = _cli("run", m, "--out", tmp_path / "run", "--metrics", "l1", "--skip-invalid", "--no-progress",
               "--option", "l1.region=inside")
    assert res.exit_code == 0, res.output
    assert "m.jsonl:1: boxes [[0.5, 0.5, 0.2, 0.9]]: box 1 is reversed" in res.output
    assert "m.jsonl:2: box 1 [0, 0, 5000, 5000] reaches past the 32x24 image" in res.output
    clipped = _cli("run", m, "--out", tmp_path / "clip", "--metrics", "l1", "--skip-invalid", "--no-progress",
                   "--clip-boxes", "--option", "l1.region=inside")
    rows = {json.loads(x)["id"]: json.loads(x) for x in open(tmp_path / "clip" / "results.jsonl")}
    assert clipped.exit_code == 0 and set(rows) == {"r1", "r2"}  # the reversed box is still refused
    assert rows["r1"]["scores"]["l1"]["status"] == "scored"
    bad = _cli("score", "--source", tmp_path / "s0.png", "--edited", tmp_path / "e0.png", "--instruction", "x",
               "--metrics", "l1", "--boxes", "[[0.5, 0.5, 0.2, 0.9]]")
    assert bad.exit_code == 2 and "reversed" in bad.output


# -- 6. SIGTERM stops a run the way Ctrl-C does ----------------------------------------------------

def test_sigterm_writes_summary_and_exports(tmp_path):
    m = _manifest(tmp_path, [f"case:slow add a hat {i}" for i in range(30)])
    out = tmp_path / "run"
    with FakeServer().running() as url:
        proc = subprocess.Popen([sys.executable, "-m", "editlens.cli.main", "run", str(m), "--out", str(out),
                                 "--metrics", "l1", "--judge", "viescore", "--vlm", url, "--cache", "none",
                                 "--batch-size", "1", "--export", "csv", "--no-progress"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        try:
            def written():
                try:
                    with sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True) as con:
                        return con.execute("SELECT count(*) FROM results WHERE evaluator='viescore'").fetchone()[0] >= 2
                except sqlite3.Error:
                    return False

            assert wait_until(written, timeout=60), proc.stderr.read() if proc.poll() is not None else "no rows"
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM" in err and "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and 2 <= summary["counts"]["viescore"]["scored"] < 30
    assert (out / "results_long.csv").is_file() and (out / "results.jsonl").is_file()


# -- 8. small edges ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command,names", [(["run"], ["--retry-unscored", "--no-retry-failed", "--allow-failures"]),
                                           (["serve"], ["--max-image-pixels", "--request-timeout",
                                                        "--max-prompt-tokens"])])
def test_help_never_cuts_option_names_at_80_columns(command, names):
    res = runner.invoke(app, [*command, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert res.exit_code == 0 and "…" not in res.output
    assert all(len(line) <= 80 for line in res.output.splitlines())
    for name in names:
        assert name in res.output


SHM_RUN = """
import os, sys
sys.path.insert(0, {tests!r})
from editlens.backends.cache import CachedBackend, ResponseCache
from editlens.backends.types import ChatRequest, Message
from scripted import ScriptedBackend
path = {path!r}
be = CachedBackend(ScriptedBackend(lambda r: "answer " + r.messages[0].parts[0]), ResponseCache(path))
for i in range(40):
    assert be.generate([ChatRequest([Message("user", [f"q{{i}}-{{k}}"])]) for k in range(10)])[0].text
    for shm in (path + "-shm",):  # what would be mapped: truncated and made read-only under the run
        if os.path.exists(shm):
            os.truncate(shm, 0)
            os.chmod(shm, 0o444)
print("finished", os.path.exists(path + "-shm"))
"""

WAL_LEFTOVER = """
import os, sqlite3
con = sqlite3.connect({path!r})
con.execute("PRAGMA journal_mode=WAL")
con.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, backend TEXT, model TEXT, created REAL, response TEXT NOT NULL)")
con.execute("INSERT INTO responses VALUES ('old', 'b', 'm', 0, '{{}}')")
con.commit()
os._exit(0)  # killed: -wal and -shm stay behind
"""


def test_cache_whose_shm_turns_read_only_cannot_kill_a_finished_run(tmp_path):
    path = str(tmp_path / "c.sqlite")
    subprocess.run([sys.executable, "-c", WAL_LEFTOVER.format(path=path)], check=True, timeout=60)
    assert os.path.exists(path + "-shm")
    os.truncate(path + "-shm", 0)  # the leftover map, ruined
    os.chmod(path + "-shm", 0o444)
    script = tmp_path / "run.py"
    script.write_text(SHM_RUN.format(tests=os.path.dirname(__file__), path=path))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=ENV)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -7 / 135 would be SIGBUS
    assert done.stdout.strip() == "finished False"  # no shared-memory map at all any more
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM responses").fetchone()[0] == 401  # the old row kept, 400 new ones


HOLD_WAL = """
import sqlite3, sys
con = sqlite3.connect({path!r})
con.execute("PRAGMA journal_mode=WAL")
con.execute("CREATE TABLE IF NOT EXISTS t (x)")
print("holding", flush=True)
sys.stdin.readline()
"""


def test_cache_held_in_wal_mode_by_another_process_is_left_alone(tmp_path, caplog):
    from editlens.backends.cache import CachedBackend, ResponseCache
    from editlens.backends.types import ChatRequest, Message

    path = str(tmp_path / "c.sqlite")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_WAL.format(path=path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with caplog.at_level("WARNING", logger="editlens.cache"):
            cache = ResponseCache(path, timeout=0.5)
            got = CachedBackend(ScriptedBackend(lambda r: "x"), cache).generate([ChatRequest([Message("user", ["q"])])])
    finally:
        holder.communicate("done\n", timeout=30)
    assert got[0].text == "x" and cache.conn is None and "WAL mode in another process" in caplog.text


@pytest.mark.parametrize("args,needle", [(["--port", "70000"], "'--port'"), (["--max-image-mb", "-1"], "--max-image-mb"),
                                         (["--max-batch", "0"], "'--max-batch'"),
                                         (["--max-image-pixels", "0"], "'--max-image-pixels'"),
                                         (["--max-prompt-tokens", "0"], "'--max-prompt-tokens'"),
                                         (["--read-timeout", "nan"], "--read-timeout")])
def test_serve_refuses_bad_limits_before_loading_anything(args, needle):
    res = runner.invoke(app, ["serve", "--vlm", "/nonexistent/model", *args])
    assert res.exit_code == 2 and needle in res.output and "Invalid value" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)  # no traceback


# -- 2, 3, 9: editlens serve on a tiny model, over real sockets ---------------------------------------

@pytest.fixture(scope="module")
def tiny_backend(tiny_vlm_dirs):
    from editlens.backends.local import TransformersBackend

    return TransformersBackend(str(tiny_vlm_dirs["idefics3"]), batch_size=8)


@pytest.fixture(scope="module")
def served(tiny_backend):
    from servers import running

    from editlens.backends.server import ServeLimits, build_app

    limits = ServeLimits(read_timeout=1.0, max_prompt_tokens=200, request_timeout=60, max_image_bytes=1_000_000)
    app = build_app(tiny_backend, "tiny", limits=limits)  # bodies up to 5 MB
    with running(app) as url:
        yield url, app


def _chat(url, text="hi", tokens=4, timeout=60, **extra):
    return httpx.post(f"{url}/chat/completions", timeout=timeout,
                      json={"messages": [{"role": "user", "content": text}], "max_tokens": tokens, **extra})


def _port(url):
    return int(url.split(":")[2].split("/")[0])


def _read_all(sock, timeout=10.0):
    """Everything the server sends until it closes the connection (bounded)."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_prompt_token_limit_is_413_naming_it(served, tiny_backend):
    from editlens.backends.types import ChatRequest, Message

    url, _ = served
    text = "make the sky blue " * 30
    n = tiny_backend.count_prompt_tokens(ChatRequest([Message("user", [text])]))
    assert n > 200
    over = _chat(url, text)
    assert over.status_code == 413 and f"prompt of {n} tokens is over the limit of 200 tokens" in over.text
    assert "--max-prompt-tokens" in over.text
    huge = _chat(url, "x" * 2_000_000)  # refused from its length alone, never tokenised
    assert huge.status_code == 413 and "characters is over the limit of 200 tokens" in huge.text
    assert _chat(url, "make the sky blue").status_code == 200


def test_slow_clients_are_cut_off_and_others_keep_going(served):
    url, _ = served
    port = _port(url)
    slow_head = socket.create_connection(("127.0.0.1", port))
    slow_head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # ... and never the rest
    slow_body = socket.create_connection(("127.0.0.1", port))
    slow_body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 500\r\n\r\n{\"messages\": ")
    t0 = time.monotonic()
    assert _chat(url).status_code == 200  # served meanwhile
    body_answer, head_answer = _read_all(slow_body), _read_all(slow_head)
    assert time.monotonic() - t0 < 5  # read time-out 1 s, not forever
    assert body_answer.startswith(b"HTTP/1.1 408") and b"--read-timeout" in body_answer
    assert head_answer == b""  # closed
    slow_head.close()
    slow_body.close()


def test_a_client_that_leaves_stops_its_generation(served):
    url, app = served
    batcher = app.state.batcher
    with socket.create_connection(("127.0.0.1", _port(url))) as sock:
        body = json.dumps({"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 2000}).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert wait_until(lambda: batcher._running, timeout=20)  # generating
    t0 = time.monotonic()
    assert wait_until(lambda: not batcher._running and not batcher._pending, timeout=10)
    assert time.monotonic() - t0 < 5  # stopped at once, not after 2,000 tokens


def _send_raw(sock, payload):
    body = json.dumps(payload).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_short_requests_flow_while_a_long_answer_runs(served):
    url, app = served
    batcher = app.state.batcher
    before = batcher.preemptions

    def long_job():
        with batcher._cv:
            return [j for j in batcher._running + batcher._pending if j.req.settings.max_new_tokens == 2000]

    with socket.create_connection(("127.0.0.1", _port(url))) as sock:
        _send_raw(sock, {"messages": [{"role": "user", "content": "tell me a story"}], "max_tokens": 2000})
        assert wait_until(lambda: batcher._running, timeout=20)
        for i in range(3):
            assert _chat(url, f"q{i}").status_code == 200
        # all three answered while the 2,000-token answer is still being generated: it yielded to them
        (job,) = long_job()
        assert batcher.preemptions > before and 0 < job.remaining < 2000
    assert wait_until(lambda: not long_job(), timeout=10)  # its client left: stopped


@pytest.mark.parametrize("family", ["idefics3", "qwen2_vl", "llava_next"])
def test_paused_answers_are_the_uninterrupted_ones(tiny_vlm_dirs, family):
    """Paused every few tokens (its cache kept), with another batch run in between and one request
    dropped half-way, a batch gives exactly the answers of an uninterrupted run."""
    from editlens.backends.local import TransformersBackend
    from editlens.backends.stepping import Control, Paused
    from editlens.backends.types import ChatRequest, GenerationSettings, Message

    be = TransformersBackend(str(tiny_vlm_dirs[family]), batch_size=4)
    greedy = GenerationSettings(max_new_tokens=24, top_logprobs=2)
    sampled = GenerationSettings(max_new_tokens=12, temperature=1.0, n=2, seed=7)
    for settings, cands in ((greedy, ("YES", "NO")), (sampled, ())):
        reqs = [ChatRequest([Message("user", [rng_image(i, 40, 48), f"What changed {i}?" * (i + 1)])], settings, cands)
                for i in range(3)]
        whole = be.generate(reqs)
        ticks = iter(range(10_000))
        states, done, todo, rounds = [None] * 3, [None] * 3, [0, 1, 2], 0
        while todo:
            out = be.generate_some([reqs[i] for i in todo], [states[i] for i in todo],
                                   Control(pause=lambda ticks=ticks: next(ticks) % 5 == 4))
            rounds += 1
            for i, o in zip(todo, out):
                if isinstance(o, Paused):
                    states[i] = o
                else:
                    done[i] = o
            be.generate([ChatRequest([Message("user", [rng_image(9, 64, 64), "other " * 5])],
                                     GenerationSettings(max_new_tokens=2))])  # another batch in between
            todo = [i for i in todo if done[i] is None and not (rounds == 2 and i == 1)]  # 1's client left
        assert rounds > 2
        for i in (0, 2):
            assert done[i].text == whole[i].text and done[i].samples == whole[i].samples
            if settings is greedy:
                assert [s.logprob for s in done[i].steps] == pytest.approx([s.logprob for s in whole[i].steps],
                                                                           abs=1e-4)


def test_hostile_battery_no_500_and_no_stalls(served, caplog):
    """Malformed, oversized, slow, long and leaving clients at once; a probe keeps asking."""
    url, _ = served
    port = _port(url)
    statuses: list[int] = []

    def post(raw: bytes) -> None:
        statuses.append(httpx.post(f"{url}/chat/completions", content=raw, timeout=60).status_code)

    def slow(head: bytes) -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.settimeout(10)
            s.sendall(head)
            s.recv(4096)

    def leaving(stream: bool) -> None:
        with socket.create_connection(("127.0.0.1", port)) as s:
            _send_raw(s, {"messages": [{"role": "user", "content": "go"}], "max_tokens": 1500, "stream": stream})
            time.sleep(0.5)

    hi = [{"role": "user", "content": "hi"}]
    strip = io.BytesIO()
    Image.new("L", (2_000_000, 1), 128).save(strip, format="PNG")  # a few KB; refused from its header (413)
    extreme = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {
        "url": "data:image/png;base64," + base64.b64encode(strip.getvalue()).decode()}}]}]
    attacks = [
        lambda: post(json.dumps({"messages": extreme, "max_tokens": 2}).encode()),
        lambda: post(b"{" * 100_000),
        lambda: post(json.dumps({"messages": hi, "max_tokens": 10**400}).encode()),
        lambda: post(json.dumps({"messages": hi, "seed": 10**30}).encode()),
        lambda: post(json.dumps({"messages": [{"role": "user", "content": "\ud800"}]}).encode()),
        lambda: post(json.dumps({"messages": [{"role": "user", "content": "word " * 100_000}]}).encode()),
        lambda: post(b" " * 6_000_000),  # over the 5 MB body limit
        lambda: post(json.dumps({"messages": hi, "max_tokens": 60}).encode()),  # long-ish, valid
        lambda: slow(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"),
        lambda: slow(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n{"),
        lambda: leaving(False),
        lambda: leaving(True),  # a stream whose reader goes away
    ]
    with caplog.at_level("INFO", logger="editlens.serve"):
        threads = [threading.Thread(target=a) for a in attacks]
        for t in threads:
            t.start()
        probes = []
        for i in range(6):
            t0 = time.monotonic()
            r = _chat(url, f"probe {i}", tokens=3)
            probes.append((r.status_code, time.monotonic() - t0))
        for t in threads:
            t.join(timeout=60)
        batcher = served[1].state.batcher
        assert wait_until(lambda: not batcher._running and not batcher._pending, timeout=10)  # nothing left behind
    assert all(s == 200 for s, _ in probes) and max(d for _, d in probes) < 10, probes
    assert 500 not in statuses and sorted(set(statuses)) == [200, 400, 413], statuses
    logged = [r.getMessage() for r in caplog.records if r.name == "editlens.serve"]
    assert logged and not any('" 500 ' in line for line in logged), logged


# -- 9. the openai client itself ----------------------------------------------------------------------

def test_openai_client_sync_usage_logprobs_n_and_streaming(served, tiny_backend):
    openai = pytest.importorskip("openai")
    from editlens.backends.types import ChatRequest, Message

    url, _ = served
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]
    msgs = [{"role": "user", "content": "Was the hat added?"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, logprobs=True, top_logprobs=2)
    prompt = tiny_backend.count_prompt_tokens(ChatRequest([Message("user", ["Was the hat added?"])]))
    u = r.usage
    assert u.prompt_tokens == prompt and 1 <= u.completion_tokens <= 6
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert len(r.choices[0].logprobs.content) == u.completion_tokens
    two = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=4, n=2, temperature=1.0, seed=5)
    assert [c.index for c in two.choices] == [0, 1] and two.usage.completion_tokens <= 8

    chunks = list(client.chat.completions.create(model="tiny", messages=msgs, max_tokens=6, stream=True,
                                                 stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == r.choices[0].message.content  # greedy: the same answer, token by token
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == u.total_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")

    with pytest.raises(openai.BadRequestError, match="'max_tokens' must be between 1"):
        client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10**30)
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "sky " * 400}],
                                       max_tokens=2)
    assert err.value.status_code == 413


def test_openai_client_async_concurrent_and_streaming(served):
    openai = pytest.importorskip("openai")
    url, _ = served

    async def main():
        client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        answers = await asyncio.gather(*[client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": f"edit {i}?"}], max_tokens=3) for i in range(12)])
        stream = await client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "edit 0?"}],
                                                      max_tokens=3, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
        return answers, text

    answers, text = asyncio.run(main())
    assert all(a.usage.completion_tokens <= 3 and a.usage.prompt_tokens > 0 for a in answers)
    assert text == answers[0].choices[0].message.content


def test_make_tiny_vlm_writes_a_model_serve_can_load(tmp_path):
    """The documented way to try `serve`: `editlens make-tiny-vlm DIR`, then `editlens serve --vlm DIR`
    (serve itself, SIGTERM included, runs as a subprocess in test_serve_limits.py)."""
    from servers import running

    from editlens.backends.local import TransformersBackend
    from editlens.backends.server import build_app

    made = _cli("make-tiny-vlm", tmp_path / "tiny")
    assert made.exit_code == 0 and f"editlens serve --vlm {tmp_path / 'tiny'}" in made.output
    assert _cli("make-tiny-vlm", tmp_path / "tiny").exit_code == 2  # never over an existing model
    with running(build_app(TransformersBackend(str(tmp_path / "tiny"), device="cpu"), "tiny")) as url:
        r = _chat(url, tokens=3)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3


def test_scripted_backend_answers_stream_whole(tmp_path):
    """A backend that cannot stream (no token callbacks) still streams: its whole answer in one delta."""
    from servers import running

    from editlens.backends.server import build_app

    with running(build_app(ScriptedBackend(lambda r: Generation("YES, done", None, "stop")), "s")) as url:
        with httpx.stream("POST", f"{url}/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                                   "stream": True}, timeout=30) as r:
            lines = [x for x in r.iter_lines() if x]
    assert lines[-1] == "data: [DONE]"
    deltas = [json.loads(x[6:])["choices"][0]["delta"].get("content", "") for x in lines[:-1]]
    assert "".join(deltas) == "YES, done"


def test_one_request_the_model_cannot_take_fails_alone():
    from editlens.backends.server import Batcher
    from editlens.backends.types import ChatRequest, Message

    def answer(req):
        if req.messages[0].parts[0] == "poison":
            raise ValueError("the model cannot take this")
        return Generation("fine", None, "stop")

    class Strict(ScriptedBackend):
        def generate(self, requests):
            return [answer(r) for r in requests]  # one bad request raises for the whole batch

    be = Strict(lambda r: "unused")
    batcher = Batcher(be, max_batch=4, window_ms=200)  # both land in one batch
    try:
        bad, good = (batcher.submit(ChatRequest([Message("user", [t])])) for t in ("poison", "ok"))
        assert good.result(timeout=10).text == "fine"
        assert "cannot take this" in bad.result(timeout=10).error
    finally:
        batcher.close()
