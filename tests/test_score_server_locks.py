"""``/v1/score`` with two evaluators: each scores one batch at a time, and a
request to one is not held behind a long batch of the other."""

from __future__ import annotations

import asyncio
import base64
import io
import threading

import numpy as np
from PIL import Image


def _b64(a: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


class _Recorded:
    """An evaluator (L1 distance) that logs when its batches start and end;
    ``hold``: a batch waits for this event before scoring (a long batch)."""

    def __init__(self, name: str, log: list[str], hold: threading.Event | None = None) -> None:
        from editlens.metrics.registry import create_metric

        self.name, self.log, self.hold = name, log, hold
        self.entered = threading.Event()
        self.inner = create_metric("l1")

    def score_batch(self, samples):  # type: ignore[no-untyped-def]
        self.log.append(f"{self.name} in")
        self.entered.set()
        if self.hold is not None:
            assert self.hold.wait(60), "the held batch was never released"
        out = self.inner.score_batch(samples)
        self.log.append(f"{self.name} out")
        return out


def test_one_evaluator_does_not_wait_behind_another():
    import httpx
    from fastapi import FastAPI

    from editlens.core.types import LoadedEdit
    from editlens.runner.score_server import score_router

    log: list[str] = []
    release = threading.Event()
    slow, fast = _Recorded("A", log, hold=release), _Recorded("B", log)
    app = FastAPI()
    app.include_router(score_router({"A": slow, "B": fast}))
    rng = np.random.default_rng(0)
    src, edt = (rng.integers(0, 256, (8, 8, 3), dtype=np.uint8) for _ in range(2))
    items = [{"source": _b64(src), "edited": _b64(edt), "instruction": "x"}]
    want = fast.inner.score_batch([LoadedEdit("0", src, edt, "x")])[0].value

    async def scenario() -> tuple[httpx.Response, httpx.Response, list[str]]:
        loop = asyncio.get_running_loop()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            a = asyncio.create_task(client.post("/v1/score", json={"metric": "A", "items": items}))
            assert await loop.run_in_executor(None, slow.entered.wait, 30)  # A's batch is running (and held)
            try:
                # with one lock for every evaluator this request would wait for A: the guard ends the test
                b = await asyncio.wait_for(client.post("/v1/score", json={"metric": "B", "items": items}), 60)
                seen_when_b_answered = list(log)
            finally:
                release.set()
            return await a, b, seen_when_b_answered

    ra, rb, seen = asyncio.run(scenario())
    assert seen == ["A in", "B in", "B out"]  # B was scored, start to end, while A's batch was still held
    assert log == ["A in", "B in", "B out", "A out"]
    assert ra.status_code == rb.status_code == 200
    assert ra.json()["metric"] == "A" and rb.json()["metric"] == "B"
    assert [s["value"] for s in rb.json()["scores"]] == [want] == [s["value"] for s in ra.json()["scores"]]
