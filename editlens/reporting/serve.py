"""Serve a run's HTML report on 127.0.0.1 (``editlens view``).

Only the report and the run's own images are served: ``/`` is the report,
``/image/N`` the N-th image the report links to. Nothing else on disk can
be reached through it.
"""

from __future__ import annotations

import mimetypes
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class ReportServer:
    """Build the report once, bind 127.0.0.1:``port`` (0 = any free port), serve.

    ``url`` is known once the constructor returns (the socket is bound).
    """

    def __init__(self, run_dir: str | Path, port: int = 0, host: str = "127.0.0.1", **report_options: Any) -> None:
        from editlens.reporting.collect import collect_run
        from editlens.reporting.html import render_run_report

        data = collect_run(run_dir, manifest=report_options.get("manifest"), human=report_options.get("human"))
        self.images: list[str] = sorted({p for s in data["samples"] for p in s["images"].values()})
        index = {p: i for i, p in enumerate(self.images)}
        page = render_run_report(data, link=lambda p: f"/image/{index[p]}",
                                 thumb_size=report_options.get("thumb_size"))
        self.page = page.encode("utf-8")
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path in ("/", "/index.html", "/report.html"):
                    return self._send(200, "text/html; charset=utf-8", server.page)
                if self.path.startswith("/image/"):
                    try:
                        path = Path(server.images[int(self.path.split("/")[2])])
                        body = path.read_bytes()
                    except (ValueError, IndexError, OSError) as exc:
                        return self._send(404, "text/plain", f"not found: {exc}".encode())
                    return self._send(200, mimetypes.guess_type(path.name)[0] or "application/octet-stream", body)
                return self._send(404, "text/plain", b"not found")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.url = f"http://{host}:{self.httpd.server_address[1]}/"
        self._thread: threading.Thread | None = None

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
