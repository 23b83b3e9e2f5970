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
import math
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

from editlens.errors import EditlensError, InputError


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


@dataclass
class ServeSettings:
    """What ``editlens serve`` serves and how (each field is the CLI option of the same name).

    ``vlm``: the local model (hub id or folder), or with ``/v1/score`` evaluators an engine's URL their
    judges ask; ``adapters``: ``{served name: LoRA folder}`` of ``vlm``; ``imitate``: ``vllm`` or
    ``sglang`` (answer as that engine does); ``api_key``: the key clients must send (the value, not the
    variable). ``max_tokens`` / ``max_prompt_tokens`` left ``None`` fit the model's context
    (:meth:`limits`)."""

    vlm: str | None = None
    name: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    max_image_mb: float = 20.0
    max_image_pixels: int = 40_000_000
    max_batch: int = 8
    max_tokens: int | None = None
    max_n: int = 8
    max_prompt_tokens: int | None = None
    prefill_tokens: int | None = None
    max_aspect_ratio: float = 100.0
    request_timeout: float = 300.0
    read_timeout: float = 30.0
    slice_ms: float = 20.0
    access_log: bool = True
    device: str = "auto"
    dtype: str = "auto"
    adapters: Mapping[str, str] = field(default_factory=dict)
    merge_adapters: bool = False
    max_images_per_prompt: int | None = None
    imitate: str | None = None
    deterministic_inference: bool = False
    max_logprobs: int = 20

    def __post_init__(self) -> None:
        for flag in ("max_image_mb", "request_timeout", "read_timeout"):
            value = getattr(self, flag)
            if not (value > 0 and math.isfinite(value)):
                raise InputError(f"--{flag.replace('_', '-')} must be a positive number, got {value:g}")
        if self.imitate is not None and self.imitate not in ("vllm", "sglang"):
            raise InputError(f"--imitate must be vllm or sglang, got {self.imitate!r}")

    @property
    def engine(self) -> bool:
        """``vlm`` is an engine's URL (served judges ask it), not a model to load here."""
        return bool(self.vlm) and str(self.vlm).startswith(("http://", "https://"))

    def limits(self) -> Any:
        """The :class:`~editlens.backends.server.ServeLimits`; token limits not given fit the model's
        context (a tiny model's context is far below 8192 + 2048 positions)."""
        from editlens.backends.server import ServeLimits

        context = context_of(self.vlm) if self.vlm and not self.engine else None
        max_tokens = self.max_tokens or (min(2048, max(1, context // 4)) if context else 2048)
        max_prompt = self.max_prompt_tokens or (min(8192, max(1, context - max_tokens)) if context else 8192)
        return ServeLimits(max_tokens=max_tokens, max_n=self.max_n, request_timeout=self.request_timeout,
                           max_image_bytes=max(1, int(self.max_image_mb * 1024 * 1024)),
                           max_image_pixels=self.max_image_pixels, max_prompt_tokens=max_prompt,
                           read_timeout=self.read_timeout, max_aspect_ratio=self.max_aspect_ratio)


def context_of(vlm: str) -> int | None:
    """The positions a local model was built for (``max_position_embeddings`` of its text config), from its
    ``config.json`` alone (no weights loaded); ``None`` when it does not say."""
    import json
    from pathlib import Path

    cfg = Path(vlm).expanduser() / "config.json"
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for part in (data.get("text_config") or {}, data):
        value = part.get("max_position_embeddings") if isinstance(part, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


def vlm_app(settings: ServeSettings, limits: Any, routers: Sequence[Any] = ()) -> tuple[Any, str]:
    """The app serving ``settings.vlm`` (a local model, loaded now; its LoRA adapters each on a copy of
    the base) over ``/v1/chat/completions``, with ``routers`` (``/v1/score``) beside it; and what it
    serves, for the banner. A limit past the model's context is said on stderr."""
    from editlens.backends.local import TransformersBackend
    from editlens.backends.scheduler import default_prefill_tokens
    from editlens.backends.server import build_app
    from editlens.models.loader import load_model

    vlm = str(settings.vlm)
    if settings.adapters and settings.engine:
        raise InputError("--adapter serves a LoRA adapter of the local --vlm model; give --vlm DIR")
    imitated = None
    if settings.imitate is not None:
        from editlens.backends.imitation import imitation

        imitated = imitation(settings.imitate, deterministic=settings.deterministic_inference,
                             max_logprobs=settings.max_logprobs)
    # the pooled model: /v1/score judges on the same --vlm share it
    backend = load_model(vlm, kind="vlm", device=settings.device, dtype=settings.dtype,
                         batch_size=settings.max_batch)
    config = getattr(getattr(backend, "model", None), "config", None)
    text_config = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    context = getattr(text_config, "max_position_embeddings", None)
    if isinstance(context, int) and limits.max_prompt_tokens + limits.max_tokens > context:
        print(f"note: --max-prompt-tokens {limits.max_prompt_tokens} plus --max-tokens {limits.max_tokens} is over "
              f"this model's context of {context} positions: longer requests are answered from positions it was "
              "not trained on", file=sys.stderr)
    served_adapters = {}
    for adapter_name, folder in settings.adapters.items():
        from editlens.backends.engine_api import load_adapter

        fresh = TransformersBackend(vlm, device=settings.device, dtype=settings.dtype, batch_size=settings.max_batch)
        served_adapters[adapter_name] = load_adapter(fresh, folder, adapter_name, merge=settings.merge_adapters)
    app = build_app(backend, settings.name or vlm, api_key=settings.api_key, max_batch=settings.max_batch,
                    limits=limits, routers=routers, slice_ms=settings.slice_ms, adapters=served_adapters,
                    max_images=settings.max_images_per_prompt,
                    prefill_tokens=settings.prefill_tokens or default_prefill_tokens(getattr(backend, "device", "cpu")),
                    imitate=imitated)
    what = settings.name or vlm
    if imitated is not None:
        what += f", answering as {imitated.engine}"
    if served_adapters:
        what += f" (adapters: {', '.join(served_adapters)})"
    return app, what
