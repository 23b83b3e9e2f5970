"""Running the ``editlens serve`` app: bind first, then announce, then serve.

* The socket is bound before the URL is printed, so the printed URL works
  (and a port in use is one clear error, not a uvicorn traceback).
* SIGTERM/SIGINT stop the generation in flight at its next token (see
  :class:`~editlens.backends.server.Batcher`), answer waiting requests with
  503 and exit within seconds, even mid-way through a long answer.
* One access-log line per request on stderr (method, path, status, latency).
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any, Callable

from editlens.errors import EditlensError


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise EditlensError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                            "pick another --port (0 = any free one)") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_app(app: Any, host: str, port: int, banner: Callable[[str], str] = str, access_log: bool = True,
              graceful_s: int = 3) -> None:
    import uvicorn

    if access_log:
        log = logging.getLogger("editlens.serve")
        if not log.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
            log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    batcher = getattr(app.state, "batcher", None)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if batcher is not None:
                batcher.close()  # stop generating now, not after the answer in flight
            super().handle_exit(sig, frame)

    server = Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=graceful_s))
    shown = f"[{host}]" if ":" in host else host
    print(banner(f"http://{shown}:{bound}/v1"), file=sys.stderr, flush=True)
    server.run(sockets=[sock])
