"""Serve a run's HTML report on 127.0.0.1 (``editlens view``).

Only the report and the run's own images are served: ``/`` is the report,
``/image/N`` the N-th image the report links to, ``/thumb/KEY`` a thumbnail
of one of them. Nothing else on disk can be reached through it.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class ReportServer:
    """Build the report, bind 127.0.0.1:``port`` (0 = any free port), serve.

    The report is rebuilt when a page is requested after the run's results
    changed (``results.sqlite`` and its write-ahead log, the manifest, the
    summary), so refreshing the page follows a run in progress. Rebuilds are
    incremental: thumbnails (cached by file identity) and bootstraps (cached
    by the values' content) are made once, and the served page links its
    thumbnails (``/thumb/KEY``, cacheable forever) instead of embedding them.
    Image numbers only grow: a page built earlier keeps working links.

    ``url`` is known once the constructor returns (the socket is bound).
    """

    #: Files of a run directory whose change means the report is out of date.
    WATCHED = ("results.sqlite", "results.sqlite-wal", "manifest.json", "summary.json")

    def __init__(self, run_dir: str | Path, port: int = 0, host: str = "127.0.0.1", **report_options: Any) -> None:
        self.run_dir = Path(run_dir)
        self.options = report_options
        self.images: list[str] = []
        self._index: dict[str, int] = {}
        self._thumbs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._state: tuple = ()
        self.builds = 0
        self.last_build_s = 0.0
        self.page = b""
        self._build()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0].split("#", 1)[0]
                if path in ("/", "/index.html", "/report.html"):
                    return self._send(200, "text/html; charset=utf-8", server.current_page())
                if path.startswith("/image/"):
                    from editlens.reporting.thumbs import image_bytes

                    try:  # a file, or an image inside a parquet/arrow file (its reference)
                        found = image_bytes(server.images[int(path.split("/")[2])])
                    except (ValueError, IndexError) as exc:
                        return self._send(404, "text/plain", f"not found: {exc}".encode())
                    if found is None:
                        return self._send(404, "text/plain", b"not found: cannot be read")
                    return self._send(200, found[1], found[0])
                if path.startswith("/thumb/"):
                    body = server._thumbs.get(path[len("/thumb/"):])
                    if body is None:
                        return self._send(404, "text/plain", b"not found")
                    # the key names the content: it never changes
                    return self._send(200, "image/jpeg", body, "public, max-age=31536000, immutable")
                if path == "/favicon.ico":  # the page has an inline icon; answer browsers that ask anyway
                    return self._send(204, "image/x-icon", b"")
                return self._send(404, "text/plain", b"not found")

            def _send(self, code: int, ctype: str, body: bytes, cache: str = "no-cache") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", cache)  # a refresh must ask again: the report may have changed
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}/"
        self._thread: threading.Thread | None = None

    def _watched_state(self) -> tuple:
        files = [self.run_dir / n for n in self.WATCHED]
        files += [Path(p) for p in (self.options.get("manifest"), self.options.get("human")) if p]
        out = []
        for f in files:
            try:
                st = f.stat()
                out.append((str(f), st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((str(f), None, None))
        return tuple(out)

    def _build(self) -> None:
        from editlens.reporting.stats import no_gc_pauses

        with no_gc_pauses():
            self._build_page()

    def _build_page(self) -> None:
        from editlens.reporting.collect import collect_run
        from editlens.reporting.html import THUMB_SIZE, THUMB_SIZE_LARGE_RUN, LARGE_RUN, render_run_report

        t0 = time.perf_counter()
        state = self._watched_state()
        data = collect_run(self.run_dir, manifest=self.options.get("manifest"), human=self.options.get("human"),
                           by=self.options.get("by"))
        paths = sorted({p for s in data["samples"] for p in s["images"].values()})
        for p in paths:
            if p not in self._index:
                self._index[p] = len(self.images)
                self.images.append(p)
        css = self.options.get("thumb_size") or (THUMB_SIZE if len(data["samples"]) <= LARGE_RUN else THUMB_SIZE_LARGE_RUN)

        def thumb_url(t: dict[str, Any]) -> str:  # thumbnails are cached: only new images are decoded
            self._thumbs[t["key"]] = t["jpeg"]
            return f"/thumb/{t['key']}"

        page = render_run_report(data, link=lambda p: f"/image/{self._index[p]}", thumb_size=css, thumb_url=thumb_url)
        self.page, self._state = page.encode("utf-8"), state
        self.builds += 1
        self.last_build_s = time.perf_counter() - t0

    def current_page(self) -> bytes:
        """The report, rebuilt first if the run changed since it was built."""
        with self._lock:
            if self._watched_state() != self._state:
                try:
                    self._build()
                except Exception as exc:  # noqa: BLE001  (a half-written run: keep serving the last good page)
                    sys.stderr.write(f"editlens view: report not rebuilt ({type(exc).__name__}: {exc}); "
                                     "serving the previous one\n")
            return self.page

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def serve_in_background(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self._thread

    def close(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever, so only when it runs in a thread
            self.httpd.shutdown()
            self._thread.join()
            self._thread = None
        self.httpd.server_close()
