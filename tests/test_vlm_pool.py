"""Judging at scale: several engine URLs of one model (`--vlm URL --vlm URL`) share the requests round robin;
an engine that gives up is left out and its requests answered by another; `bench run` gives the same table
as with one engine."""

from __future__ import annotations

import json

import bench_files as F
from fake_openai import FakeServer
from test_bench_run import INSTRUCTIONS, ScoringServer
from test_editors import SCRIPTED, cli

from editlens.backends.http import PooledBackend
from editlens.backends.types import ChatRequest, Message


def ask(text: str) -> ChatRequest:
    return ChatRequest([Message("user", [text])])


class DownServer(ScoringServer):
    """Serves the model list, then answers every chat request with HTTP 500 (a sick engine)."""

    def case_of(self, body):  # type: ignore[no-untyped-def]
        return "500"


def test_round_robin_over_healthy_engines_and_failover():
    a, b, down = FakeServer(), FakeServer(), DownServer()
    with a.running() as ua, b.running() as ub, down.running() as ud:
        pool = PooledBackend([ua, ub], max_retries=0, backoff=0.0)
        gens = pool.generate([ask(f"q{i}") for i in range(8)])
        assert all(g.error is None for g in gens) and (len(a.requests), len(b.requests)) == (4, 4)
        sick = PooledBackend([ud, ua], max_retries=0, backoff=0.0)
        gens = sick.generate([ask(f"q{i}") for i in range(6)])
        assert all(g.error is None for g in gens)  # the sick engine's requests went to the other
        assert len(down.requests) == 3 and sick.health() == {ud: False, ua: True}
        again = sick.generate([ask("q") for _ in range(4)])
        assert all(g.error is None for g in again) and len(down.requests) == 3  # left out while cooling down
        only_down = PooledBackend([ud, ud + "/"], max_retries=0, backoff=0.0)
        lost = only_down.generate([ask("q")])
        assert lost[0].error and "gave up" in lost[0].error  # every engine gave up: failed, never a score
    assert pool.describe() == {"backend": "openai-http", "url": "pool", "model": "fake", "served": pool.revision}


def test_bench_run_over_two_engines_gives_the_one_engine_table(tmp_path):
    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    good, down = ScoringServer(), DownServer()
    with good.running() as url, down.running() as bad:
        def bench(out, *vlms):
            args = ["bench", "run", "gedit", "--data", data, "--editor", SCRIPTED, "--out", out, "--cache", "none",
                    "--n-boot", "20", "--json", "--no-report", "--max-retries", "0"]
            for v in vlms:
                args += ["--vlm", v]
            r = cli(*args)
            assert r.exit_code == 0, r.output
            return json.loads(r.stdout)

        one = bench(tmp_path / "one", url)
        two = bench(tmp_path / "two", bad, url)
    assert down.requests and two["models"] == one["models"]


def test_every_engine_of_a_pool_is_probed_and_a_sick_one_is_named():
    from editlens.backends.engine import EngineNeeds, check_engine
    from editlens.errors import ModelUnavailableError

    a, b, down = FakeServer(), FakeServer(), DownServer()
    with a.running() as ua, b.running() as ub, down.running() as ud:
        caps = check_engine(PooledBackend([ua, ub], max_retries=0), EngineNeeds(images=2), "the judge", "--vlm")
        assert caps["images_per_prompt"] == "at least 2" and len(a.requests) == len(b.requests) == 1
        import pytest

        sick = PooledBackend([ud, ua], max_retries=0, backoff=0.0)  # a sick engine at start is left out
        check_engine(sick, EngineNeeds(images=3), "the judge", "--vlm")
        assert sick.health() == {ud: False, ua: True}
        with pytest.raises(ModelUnavailableError, match="no engine of --vlm answers"):
            check_engine(PooledBackend([ud, ud + "/"], max_retries=0, backoff=0.0), EngineNeeds(images=4),
                         "the judge", "--vlm")
