"""Start ASGI apps on 127.0.0.1 in a background thread for tests."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(app: Any) -> Iterator[str]:
    import uvicorn

    from editlens.backends.serving import uvicorn_config

    port = free_port()
    # the settings editlens serve runs with (request-head time-out included)
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        if time.time() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
