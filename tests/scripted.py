"""A scripted backend for tests of parsing and pipeline logic: it returns
fixed answers and counts calls. (The product itself never fakes answers.)"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from editlens.backends.types import ChatRequest, Generation


class ScriptedBackend:
    name = "scripted"
    model_id = "scripted"
    revision = None

    def __init__(self, answer: Callable[[ChatRequest], Generation | str]) -> None:
        self.answer = answer
        self.calls = 0
        self.requests: list[ChatRequest] = []

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    def generate(self, requests: Sequence[ChatRequest]) -> list[Generation]:
        self.calls += 1
        self.requests += list(requests)
        out = []
        for r in requests:
            a = self.answer(r)
            out.append(Generation(a) if isinstance(a, str) else a)
        return out
