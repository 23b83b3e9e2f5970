"""``editlens serve`` composed from plain settings, callable from Python: a local VLM over an
OpenAI-compatible API (:func:`editlens.backends.serving.vlm_app`), registered evaluators over
``POST /v1/score`` (:mod:`editlens.runner.score_server`), or both on one port.

>>> from editlens.backends.serving import ServeSettings
>>> server = build_server(ServeSettings(), score=["psnr"])  # doctest: +SKIP
>>> serve(server, ServeSettings(port=0))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from editlens.backends.serving import ServeSettings, vlm_app
from editlens.errors import InputError


@dataclass
class Server:
    """A composed server: the ASGI ``app``, what it serves (``what``, the banner's words) and the
    evaluators behind ``/v1/score`` (loaded)."""

    app: Any
    what: str
    scored: dict[str, Any] = field(default_factory=dict)
    api_key: bool = False


def build_server(settings: ServeSettings, score: Sequence[str] | None = None, *,
                 models: Mapping[str, str] | None = None, options: Mapping[str, Mapping[str, Any]] | None = None,
                 judge: Any = None) -> Server:
    """The app of ``settings``: with ``score`` (evaluator names), ``/v1/score`` too, the evaluators built
    with ``models`` and ``options`` (``{name: {key: value}}``) and loaded now (the first request must not
    wait for a model); their judges use ``judge`` (a :class:`~editlens.runner.judge_settings.JudgeSettings`,
    default: ``settings.vlm``, the model served here or an engine's URL)."""
    if not settings.vlm and not score:
        raise InputError("give --vlm (a local model to serve) and/or --score (evaluators for /v1/score)")
    if settings.engine and not score:
        raise InputError(f"editlens serve loads a local model (--vlm HUB_ID_OR_DIR); {settings.vlm} is already a "
                         "server: pass it as --vlm to score, run or compare instead")
    limits = settings.limits()
    if settings.adapters and (not settings.vlm or settings.engine):
        raise InputError("--adapter serves a LoRA adapter of the local --vlm model; give --vlm DIR")
    routers, scored = [], {}
    if score:  # POST /v1/score with registered evaluators (adiee, editscore, yes_no...), for RL trainers
        from editlens.runner.judge_settings import JudgeSettings
        from editlens.runner.score_server import score_router
        from editlens.runner.selection import select_metrics

        if judge is None:
            judge = JudgeSettings(settings.vlm, device=settings.device, dtype=settings.dtype)
        sel = select_metrics(list(score), models=dict(models or {}), options=dict(options or {}),
                             device=settings.device, dtype=settings.dtype,
                             vlm=judge.vlm_options() if settings.vlm else None, http=judge.http)
        scored = {m.name: m for m in sel.metrics}
        for m in sel.metrics:  # load now: the first request must not wait for a model to load
            getattr(m, "describe", lambda: None)()
        routers.append(score_router(scored, limits=limits))
    if settings.vlm and not settings.engine:
        app, what = vlm_app(settings, limits, routers)
    else:
        from editlens.runner.score_server import score_app

        app, what = score_app(scored, api_key=settings.api_key, limits=limits), f"/v1/score ({', '.join(scored)})"
    return Server(app, what, scored, api_key=bool(settings.api_key))


def serve(server: Server, settings: ServeSettings) -> None:
    """Bind ``settings.host``:``settings.port``, print the URL, serve until SIGINT/SIGTERM."""
    from editlens.backends import serving

    serving.serve_app(server.app, settings.host, settings.port,
              banner=lambda url: f"serving {server.what} at {url}" + (" (API key required)" if server.api_key else ""),
              access_log=settings.access_log)
