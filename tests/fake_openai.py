"""A misbehaving OpenAI-compatible server on 127.0.0.1 for fault-injection tests.

Each request's behaviour is chosen by a ``case:NAME`` marker in its prompt
text, so one run can meet every fault at once. While ``broken`` is set the
server misbehaves as named; once fixed it answers every request properly.
Handlers never wait longer than ``max_hang`` seconds, and the server stops
when the ``with`` block ends.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

GOOD = '{"score": [8, 7], "reasoning": "the edit was done"}'
CASES = ("ok", "429", "500", "reset", "hang", "empty_choices", "empty_content", "null_content", "garbage",
         "truncated", "array", "unparsable")
#: cases a test names itself: "lose_seed1" fails only the request with seed 1 (one sample of an ensemble),
#: "echo" answers with the scale alone, "slow" answers properly after 0.2 s (broken or not)
MORE_CASES = ("lose_seed1", "echo", "slow")


def answer(content: str) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "model": "fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}


class FakeServer:
    def __init__(self, max_hang: float = 3.0) -> None:
        self.broken = True
        self.max_hang = max_hang
        self.requests: list[str] = []  # case of every chat request received
        self.bodies: list[dict[str, Any]] = []  # and its body
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def good_answer(self, body: dict[str, Any]) -> str:
        """The answer to a request that is served properly (tests may vary it with the prompt)."""
        return GOOD

    def case_of(self, body: dict[str, Any]) -> str:
        text = json.dumps(body.get("messages", ""))
        m = re.search(r"case:(\w+)", text)
        return m.group(1) if m else "ok"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                      length: int | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) if length is None else length))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, json.dumps({"data": [{"id": "fake", "owned_by": "tests", "root": "fake-v1"}]}).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}')
                    return
                body = json.loads(raw)
                case = fake.case_of(body)
                with fake._lock:
                    fake.requests.append(case)
                    fake.bodies.append(body)
                if case == "slow":
                    fake._stop.wait(0.2)
                    self._send(200, json.dumps(answer(fake.good_answer(body))).encode())
                elif not fake.broken or case == "ok":
                    self._send(200, json.dumps(answer(fake.good_answer(body))).encode())
                elif case == "unparsable":
                    self._send(200, json.dumps(answer("It looks fine to me.")).encode())
                elif case == "429":
                    self._send(429, b'{"error": "slow down"}', {"Retry-After": "0"})
                elif case == "500":
                    self._send(500, b'{"error": "internal"}')
                elif case == "reset":
                    # RST instead of an answer: SO_LINGER with a zero time-out
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                elif case == "hang":
                    fake._stop.wait(fake.max_hang)  # longer than the client's time-out
                    self.close_connection = True
                elif case == "empty_choices":
                    self._send(200, b'{"choices": []}')
                elif case == "empty_content":
                    self._send(200, b'{"choices": [{"message": {"role": "assistant", "content": ""}}]}')
                elif case == "null_content":  # "finished" with nothing said: a lost answer, not an answer
                    self._send(200, b'{"choices": [{"message": {"role": "assistant", "content": null}, '
                                    b'"finish_reason": "stop"}]}')
                elif case == "lose_seed1":
                    if body.get("seed") == 1:
                        self._send(500, b'{"error": "lost"}')
                    else:
                        self._send(200, json.dumps(answer(fake.good_answer(body))).encode())
                elif case == "echo":
                    self._send(200, json.dumps(answer("[0, 10]")).encode())
                elif case == "garbage":
                    self._send(200, b"<html>502 Bad Gateway</html>")
                elif case == "truncated":
                    body = json.dumps(answer(GOOD)).encode()
                    self._send(200, body[: len(body) // 2])
                elif case == "array":
                    self._send(200, b"[1, 2, 3]")
                else:
                    self._send(400, b'{"error": "unknown case"}')

        return Handler

    @contextmanager
    def running(self) -> Iterator[str]:
        server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/v1"
        finally:
            self._stop.set()
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


def wait_until(predicate: Any, timeout: float = 10.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
