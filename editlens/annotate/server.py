"""The labelling page and its JSON API (FastAPI on uvicorn, as ``editlens serve`` runs).

* ``GET /?token=T``: the page of the annotator whose token is T (a cookie then carries it);
* ``GET /api/state``: the annotator's progress and next item; ``POST /api/vote``: an answer to it, written
  (one committed transaction) before the next item is returned;
* ``GET /img/N``: the N-th image of the task (only images the task's items show, and only while they
  decode as images).

Every request needs a ``Host`` that is this server's own address (a page on another site that rebinds
its name to 127.0.0.1 gets 403, as ``editlens view``) and an annotator's token (``?token=``, the cookie,
or an ``X-Editlens-Token`` header): 403 otherwise. Bad answers are 400 with the reason, a repeated
answer 409; never a 500.
"""

from __future__ import annotations

import html
import json
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import Request  # at module level: FastAPI resolves the endpoints' annotations here

from editlens.annotate.store import DuplicateVote
from editlens.annotate.task import Task
from editlens.core.hosts import host_refusal, own_hosts
from editlens.errors import EditlensError

COOKIE = "editlens_annotate_token"
#: the largest answer accepted (a reason of 2,000 characters fits many times)
MAX_BODY = 64 * 1024


def _asset(name: str) -> str:
    from importlib import resources

    return resources.files("editlens.annotate").joinpath("assets", name).read_text(encoding="utf-8")


def _report_asset(name: str) -> str:
    from editlens.reporting.markup import asset

    return asset(name)


class AnnotateServer:
    """Serve the task of ``folder`` on ``host:port`` (0: a free port). ``links`` is known once built
    (the socket is bound first)."""

    def __init__(self, folder: str | Path, host: str = "127.0.0.1", port: int = 0) -> None:
        from editlens.backends.serving import bind

        self.sock = bind(host, port)  # first: a port in use is one clear error, before anything is opened
        try:
            self.task = Task(folder)
        except BaseException:
            self.sock.close()
            raise
        self.images = self.task.image_paths()
        self._index = {p: i for i, p in enumerate(self.images)}
        self._image_cache: dict[int, tuple[str, bytes]] = {}
        self.host, self.port = host, self.sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.base = f"http://{shown}:{self.port}/"
        self.hosts = own_hosts(host, self.port)
        self._page_parts = (_asset("page.html"), _report_asset("report.css") + "\n" + _asset("page.css"),
                            _asset("page.js"))
        self.app = self._build_app()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def links(self) -> dict[str, str]:
        """Each web annotator's own link (their token in it)."""
        return {n: f"{self.base}?token={a['token']}" for n, a in self.task.store.annotators().items()
                if a["token"] and a["origin"] == "web"}

    # ------------------------------------------------------------------------------------------------ pieces
    def refusal(self, host: str | None) -> str | None:
        return host_refusal(host, self.hosts, "this labelling page")

    def page(self, annotator: str, token: str) -> bytes:
        from editlens import __version__
        from editlens.reporting.markup import fill, page_head

        settings = self.task.settings
        title = ("Which edit is better?" if settings["task"] == "pairwise" else "Rate the edit")
        # the page sends its own annotator's token with every call: another annotator's link opened later in
        # the same browser (whose cookie then wins) cannot turn this page's votes into theirs
        data = {"annotator": annotator, "token": token, "task": settings["task"], "preset": self.task.preset}
        tpl, css, js = self._page_parts
        out = fill(tpl, {"HEAD": page_head(title, css), "TITLE": html.escape(title), "VERSION": html.escape(__version__),
                         "JS": js, "DATA": json.dumps(data).replace("</", "<\\/")})
        return out.encode("utf-8")

    def image_url(self, path: str) -> str:
        return f"img/{self._index[path]}"

    def image(self, n: int) -> tuple[str, bytes]:
        import io

        from PIL import Image, UnidentifiedImageError

        from editlens.reporting.thumbs import image_bytes

        if n in self._image_cache:
            return self._image_cache[n]
        if not 0 <= n < len(self.images):
            raise OSError("no such image")
        found = image_bytes(self.images[n])
        if found is None:
            raise OSError("cannot be read")
        body = found[0]
        try:
            fmt = Image.open(io.BytesIO(body)).format
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
            raise OSError("not an image") from None
        ctype = Image.MIME.get(fmt or "") or ""
        if not ctype.startswith("image/"):
            raise OSError("not an image")
        if len(body) < 4_000_000:
            self._image_cache[n] = (ctype, body)
        return ctype, body

    def state(self, annotator: str) -> dict[str, Any]:
        row = self.task.current(annotator)
        return {"annotator": annotator, "progress": self.task.progress(annotator),
                "item": None if row is None else self.task.page_item(row, self.image_url)}

    # ------------------------------------------------------------------------------------------------ the app
    def _build_app(self) -> Any:
        from urllib.parse import parse_qs

        from fastapi import FastAPI
        from fastapi.responses import JSONResponse, Response

        app = FastAPI(title="editlens annotate", docs_url=None, redoc_url=None, openapi_url=None)
        server = self

        @app.middleware("http")
        async def guard(request: Request, call_next: Any) -> Any:
            refused = server.refusal(request.headers.get("host"))
            if refused:
                return JSONResponse({"error": refused}, status_code=403)
            if request.url.path == "/favicon.ico":
                return Response(status_code=204)
            # the page's own token (query, header) before the cookie, which the last link opened set
            token = ((parse_qs(request.url.query).get("token") or [""])[0] or request.headers.get("x-editlens-token")
                     or request.cookies.get(COOKIE) or "")
            who = server.task.annotator_of(token) if token else None
            if who is None:
                return JSONResponse({"error": "a valid annotator token is required: open the link "
                                     "`editlens annotate` printed for you"}, status_code=403)
            request.state.annotator = who
            request.state.token = token
            return await call_next(request)

        @app.exception_handler(EditlensError)
        async def bad_input(request: Request, exc: EditlensError) -> Any:
            return JSONResponse({"error": str(exc)}, status_code=409 if isinstance(exc, DuplicateVote) else 400)

        @app.get("/")
        def index(request: Request) -> Any:
            resp = Response(server.page(request.state.annotator, request.state.token), media_type="text/html; charset=utf-8",
                            headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
                                     "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                                     "style-src 'unsafe-inline'; script-src 'unsafe-inline'; connect-src 'self'"})
            resp.set_cookie(COOKIE, request.state.token, httponly=True, samesite="strict", path="/")
            return resp

        @app.get("/api/state")
        def get_state(request: Request) -> Any:
            return JSONResponse(server.state(request.state.annotator), headers={"Cache-Control": "no-store"})

        @app.post("/api/vote")
        async def post_vote(request: Request) -> Any:
            raw = await request.body()
            if len(raw) > MAX_BODY:
                return JSONResponse({"error": f"an answer is at most {MAX_BODY} bytes"}, status_code=413)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return JSONResponse({"error": "the body must be JSON"}, status_code=400)
            position = body.get("position") if isinstance(body, dict) else None
            if not isinstance(position, int) or isinstance(position, bool):
                return JSONResponse({"error": "give {position, choice | scores, reason}"}, status_code=400)
            shown = body.get("shown_ms")
            shown = int(shown) if isinstance(shown, (int, float)) and shown >= 0 else None
            from starlette.concurrency import run_in_threadpool

            who = request.state.annotator
            await run_in_threadpool(server.task.vote, who, body["position"], body, shown)
            return JSONResponse(await run_in_threadpool(server.state, who), headers={"Cache-Control": "no-store"})

        @app.get("/img/{n}")
        def img(n: int) -> Any:
            try:
                ctype, body = server.image(n)
            except OSError as exc:
                return JSONResponse({"error": f"image {n}: {exc}"}, status_code=404)
            return Response(body, media_type=ctype, headers={"Cache-Control": "private, max-age=3600",
                                                             "X-Content-Type-Options": "nosniff"})

        return app

    # ------------------------------------------------------------------------------------------------ running
    def _uvicorn(self) -> Any:
        import uvicorn

        from editlens.backends.serving import uvicorn_config

        return uvicorn.Server(uvicorn_config(self.app, self.host, self.port))

    def serve_forever(self) -> None:
        self._server = self._uvicorn()
        self._server.run(sockets=[self.sock])

    def start(self) -> "AnnotateServer":
        """Serve in a background thread (tests, scripts); :meth:`close` stops it."""
        self._server = self._uvicorn()
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self._thread.start()
        deadline = time.time() + 20
        while not self._server.started:
            if time.time() > deadline or not self._thread.is_alive():
                raise EditlensError("the labelling server did not start")
            time.sleep(0.02)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.sock.close()
        self.task.close()
