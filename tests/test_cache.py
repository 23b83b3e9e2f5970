"""The SQLite response cache."""

import os
import threading

import pytest
from helpers import rng_image
from scripted import ScriptedBackend

from editlens.backends.cache import CachedBackend, ResponseCache
from editlens.backends.types import ChatRequest, Generation, Message
from editlens.errors import EditlensError


def _req(text, seed=0):
    return ChatRequest([Message("user", [rng_image(seed, 8, 8), text])])


def test_rerun_makes_no_calls(tmp_path):
    inner = ScriptedBackend(lambda r: "answer to " + r.messages[0].parts[1])
    be = CachedBackend(inner, ResponseCache(tmp_path / "c.sqlite"))
    first = be.generate([_req("a"), _req("b"), _req("a")])
    assert inner.calls == 1 and len(inner.requests) == 2  # duplicate asked once
    again = CachedBackend(inner, ResponseCache(tmp_path / "c.sqlite")).generate([_req("a"), _req("b")])
    assert inner.calls == 1 and [g.text for g in again] == [g.text for g in first[:2]]
    assert all(g.cached for g in again)


def test_key_covers_image_content_and_settings(tmp_path):
    inner = ScriptedBackend(lambda r: "x")
    be = CachedBackend(inner, ResponseCache(tmp_path / "c.sqlite"))
    be.generate([_req("a", seed=0)])
    be.generate([_req("a", seed=1)])  # different image, same text
    assert len(inner.requests) == 2


def test_errors_are_not_cached(tmp_path):
    inner = ScriptedBackend(lambda r: Generation(None, error="HTTP 503"))
    be = CachedBackend(inner, ResponseCache(tmp_path / "c.sqlite"))
    be.generate([_req("a")])
    be.generate([_req("a")])
    assert inner.calls == 2


def test_concurrent_writers(tmp_path):
    path = tmp_path / "c.sqlite"
    errors = []

    def worker(k):
        try:
            be = CachedBackend(ScriptedBackend(lambda r: "x"), ResponseCache(path))
            for i in range(20):
                be.generate([_req(f"w{k}-{i}")])
        except Exception as exc:  # pragma: no cover - the assertion reports it
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(ResponseCache(path)) == 80


def test_corrupt_cache_is_a_clear_error(tmp_path):
    p = tmp_path / "c.sqlite"
    p.write_bytes(b"garbage" * 1000)
    with pytest.raises(EditlensError, match="response cache is corrupt"):
        ResponseCache(p)


# -- a cache that cannot be written never costs a received answer ----------------------------------

def _answers(n):
    return [_req(f"q{i}") for i in range(n)]


def test_locked_cache_keeps_every_answer(tmp_path, caplog):
    import sqlite3

    path = tmp_path / "c.sqlite"
    ResponseCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the cache for long
    try:
        inner = ScriptedBackend(lambda r: "paid for " + r.messages[0].parts[1])
        be = CachedBackend(inner, ResponseCache(path, timeout=0.3))
        with caplog.at_level("WARNING", logger="editlens.cache"):
            first = be.generate(_answers(20))
            assert not be.cache.writable  # gave up writing once ...
            tried = []
            real_put = type(be.cache).put_many
            be.cache.put_many = lambda items: tried.append(len(items)) or real_put(be.cache, items)
            second = be.generate([_req("more")])
            # ... and does not wait on the lock again: the put returns at once, before any SQL
            from editlens.core.cache import SqliteCache

            assert tried == [1] and SqliteCache.put_many(be.cache, [("k", "v")]) is False
    finally:
        holder.execute("ROLLBACK")
    assert [g.text for g in first] == [f"paid for q{i}" for i in range(20)] and second[0].text == "paid for more"
    warnings = [r for r in caplog.records if r.name == "editlens.cache"]
    # (a rollback journal: the lock holder blocks opening too, so the warning may say "without a cache")
    assert len(warnings) == 1 and "going on without" in warnings[0].getMessage()


def test_read_only_cache_is_read_and_answers_kept(tmp_path, monkeypatch, caplog):
    from editlens.core import cache as cache_mod

    path = tmp_path / "c.sqlite"
    be = CachedBackend(ScriptedBackend(lambda r: "old"), ResponseCache(path))
    be.generate([_req("known")])
    be.cache.close()
    # the file can only be opened read-only (as for a file the user may not write)
    monkeypatch.setattr(cache_mod, "_connect", cache_mod._connect_readonly)
    inner = ScriptedBackend(lambda r: "new")
    with caplog.at_level("WARNING", logger="editlens.cache"):
        ro = ResponseCache(path)
        got = CachedBackend(inner, ro).generate([_req("known"), _req("unknown")])
    assert not ro.writable
    assert [g.text for g in got] == ["old", "new"] and got[0].cached  # cached answer read, new one kept
    assert "without caching" in caplog.text and caplog.text.count("response cache") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files anyway")
def test_read_only_file_for_real(tmp_path):
    path = tmp_path / "c.sqlite"
    ResponseCache(path).close()
    os.chmod(path, 0o444)
    os.chmod(tmp_path, 0o555)
    try:
        got = CachedBackend(ScriptedBackend(lambda r: "x"), ResponseCache(path)).generate(_answers(3))
    finally:
        os.chmod(tmp_path, 0o755)
    assert [g.text for g in got] == ["x"] * 3


def test_cache_folder_that_cannot_exist(tmp_path, caplog):
    (tmp_path / "afile").write_text("not a folder")
    with caplog.at_level("WARNING", logger="editlens.cache"):
        got = CachedBackend(ScriptedBackend(lambda r: "x"), ResponseCache(tmp_path / "afile" / "c.sqlite")).generate(
            _answers(2))
    assert [g.text for g in got] == ["x", "x"] and "without a cache" in caplog.text


def test_undecodable_row_is_reported_and_recomputed(tmp_path, caplog):
    import sqlite3

    path = tmp_path / "c.sqlite"
    inner = ScriptedBackend(lambda r: "fresh")
    be = CachedBackend(inner, ResponseCache(path))
    be.generate([_req("a")])
    con = sqlite3.connect(path)
    con.execute("UPDATE responses SET response = '{broken json'")
    con.commit()
    con.close()
    with caplog.at_level("WARNING", logger="editlens.cache"):
        again = CachedBackend(inner, ResponseCache(path)).generate([_req("a")])
    assert again[0].text == "fresh" and not again[0].cached and inner.calls == 2
    assert "cannot be decoded" in caplog.text
    assert CachedBackend(inner, ResponseCache(path)).generate([_req("a")])[0].cached  # repaired


def test_key_covers_device_dtype_and_served_revision(tmp_path):
    from editlens.backends.types import request_key

    class Local(ScriptedBackend):
        def __init__(self, device, dtype, revision=None):
            super().__init__(lambda r: "x")
            self.device, self.dtype, self.revision = device, dtype, revision

        def describe(self):
            return {"backend": self.name, "device": self.device, "dtype": self.dtype}

    r = _req("a")
    keys = {request_key(Local("cpu", "float32"), r), request_key(Local("cuda", "bfloat16"), r),
            request_key(Local("cpu", "bfloat16"), r), request_key(Local("cpu", "float32", '{"root": "v2"}'), r)}
    assert len(keys) == 4
    assert request_key(Local("cpu", "float32"), r) == request_key(Local("cpu", "float32"), r)


WRITER = """
import sys
sys.path.insert(0, {tests!r})
from editlens.backends.cache import CachedBackend, ResponseCache
from editlens.backends.types import ChatRequest, Message
from scripted import ScriptedBackend
k = int(sys.argv[1])
be = CachedBackend(ScriptedBackend(lambda r: r.messages[0].parts[0].upper()), ResponseCache({path!r}))
for i in range(25):
    assert be.generate([ChatRequest([Message("user", [f"p{{k}}-{{i}}"])])])[0].text == f"P{{k}}-{{i}}"
"""


def test_several_processes_write_at_once(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "c.sqlite"
    script = tmp_path / "w.py"
    script.write_text(WRITER.format(tests=os.path.dirname(__file__), path=str(path)))
    procs = [subprocess.Popen([sys.executable, str(script), str(k)], stderr=subprocess.PIPE, text=True)
             for k in range(3)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    assert not any("warning" in e for e in errs)  # nobody gave up caching
    cache = ResponseCache(path)
    assert len(cache) == 75
    inner = ScriptedBackend(lambda r: "recomputed")
    got = CachedBackend(inner, cache).generate([ChatRequest([Message("user", [f"p{k}-{i}"])])
                                                for k in range(3) for i in range(25)])
    assert inner.calls == 0 and got[-1].text == "P2-24"


# -- one cache layer ----------------------------------------------------------------------------------------

def test_every_cache_is_a_table_of_the_one_layer(tmp_path):
    """Only the cache layer and the durable stores (a run's results, an annotation task's votes) talk to
    SQLite; ADIEE's and the
    reward models' caches get its robustness (corrupt file named with the way
    out, empty cache still used, undecodable rows recomputed)."""
    import pathlib
    import sqlite3

    from editlens.adiee.evaluator import score_cache
    from editlens.core.cache import SqliteCache
    from editlens.rewardmodels.common import result_cache

    pkg = pathlib.Path(__file__).resolve().parents[1] / "editlens"
    talkers = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*.py") if "import sqlite3" in p.read_text())
    assert talkers == ["annotate/store.py", "core/cache.py", "runner/store.py"]

    c = score_cache(tmp_path / "a.sqlite")
    assert isinstance(c, SqliteCache) and bool(c) and len(c) == 0
    assert c.put_many({"k": {"score": 3.0}}) and c.get_many(["k"]) == {"k": {"score": 3.0}}
    con = sqlite3.connect(tmp_path / "a.sqlite")
    con.execute("UPDATE scores SET result = '{nope'")
    con.commit()
    con.close()
    assert score_cache(tmp_path / "a.sqlite").get_many(["k"]) == {}  # recomputed, not an error
    bad = tmp_path / "r.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(EditlensError, match=r"editreward cache is corrupt.*editreward\.cache=none"):
        result_cache(bad, "editreward")
