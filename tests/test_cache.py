"""The SQLite response cache."""

import threading

import pytest

from editlens.backends.cache import CachedBackend, ResponseCache
from editlens.backends.types import ChatRequest, Generation, Message
from editlens.errors import EditlensError

from helpers import rng_image
from scripted import ScriptedBackend


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
