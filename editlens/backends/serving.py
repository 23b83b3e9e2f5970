"""Running the ``editlens serve`` app: bind first, then announce, then serve.

* The socket is bound before the URL is printed, so the printed URL works
  (and a port in use is one clear error, not a uvicorn traceback).
* SIGTERM/SIGINT stop the generation in flight at its next token (see
  :class:`~editlens.backends.server.Batcher`), answer waiting requests with
  503 and exit within seconds, even mid-way through a long answer.
* One access-log line per request on stderr (method, path, status, latency).
* A client must send a request's head within ``read_timeout`` seconds of
  connecting (or of its previous answer), else the connection is closed: a
  slow client cannot hold a connection forever (the body has the same limit,
  see :func:`~editlens.backends.server.build_app`).
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


def timed_h11(read_timeout: float) -> type:
    """uvicorn's HTTP/1.1 protocol, closing connections whose request head does
    not arrive within ``read_timeout`` seconds (uvicorn itself waits forever
    once the first byte came: a slowloris client would hold the socket)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11(H11Protocol):
        _head_timer: Any = None

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(read_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_slow(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            if self.cycle is not None and self.cycle is not before:
                self._disarm()  # a whole request head arrived: the app times the body

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # keep-alive: the next request's head has the same limit

    return TimedH11


def uvicorn_config(app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                   graceful_s: int = 3) -> Any:
    """The uvicorn settings ``editlens serve`` runs ``app`` with (tests use them too)."""
    import uvicorn

    limits = getattr(getattr(app, "state", None), "limits", None)
    read_timeout = getattr(limits, "read_timeout", 30.0)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=graceful_s,
                          http=timed_h11(read_timeout), timeout_keep_alive=5)


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
    batchers = list((getattr(app.state, "batchers", None) or {}).values()) or \
        [b for b in [getattr(app.state, "batcher", None)] if b is not None]

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            for batcher in batchers:
                batcher.close()  # stop generating now, not after the answer in flight
            super().handle_exit(sig, frame)

    server = Server(uvicorn_config(app, host, bound, graceful_s=graceful_s))
    shown = f"[{host}]" if ":" in host else host
    print(banner(f"http://{shown}:{bound}/v1"), file=sys.stderr, flush=True)
    server.run(sockets=[sock])
