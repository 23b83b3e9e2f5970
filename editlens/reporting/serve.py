"""Serve a run's HTML report on 127.0.0.1 (``editlens view``).

Only the report and the run's own images are served: ``/`` is the report,
``/image/N`` the N-th image the report links to, ``/thumb/KEY`` a thumbnail
of one of them. Nothing else on disk can be reached through it:

* an image is served only when the run decoded it, by the run store's record
  of the files each sample was read from (``loaded_images``: real paths,
  symbolic links followed), and the file is an image now (its header
  decodes), with the image type it holds: a manifest row naming a file the
  run never read (a system file) gets 404. Runs made before that record
  existed (and runs resumed from them) fall back to their results: an image
  of a sample with a result that is not ``failed`` (``editlens view`` says so);
* a request whose ``Host`` is not this server's own address is refused
  (403): a web page that rebinds its DNS name to 127.0.0.1 gets nothing;
* with a token (``editlens view --token``) every request must carry it
  (``?token=`` once: the page then sets a cookie), for shared machines.
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Mapping

from editlens.core.hosts import host_refusal, own_hosts
from editlens.reporting.memo import ReportCache

TOKEN_COOKIE = "editlens_view_token"


class ReportServer:
    """Build the report, bind 127.0.0.1:``port`` (0 = any free port), serve.

    The report is rebuilt when a page is requested after the run's results
    changed (``results.sqlite`` and its write-ahead log, the manifest, the
    summary), so refreshing the page follows a run in progress. Rebuilds are
    incremental: the server owns its report's :class:`~editlens.reporting.memo.ReportCache`
    (thumbnails by file identity, bootstraps by the values' content, samples
    by their results and images), so each is made once, and the served page links its
    thumbnails (``/thumb/KEY``, cacheable forever) instead of embedding them.
    Image numbers only grow: a page built earlier keeps working links.

    ``url`` is known once the constructor returns (the socket is bound).
    """

    #: Files of a run directory whose change means the report is out of date.
    WATCHED = ("results.sqlite", "results.sqlite-wal", "manifest.json", "summary.json")

    def __init__(self, run_dir: str | Path, port: int = 0, host: str = "127.0.0.1", token: str | None = None,
                 **report_options: Any) -> None:
        self.run_dir = Path(run_dir)
        self.options = report_options
        self.token = token
        self.images: list[str] = []
        self._loaded: set[str] = set()  # report images the run read
        self._recorded: set[str] | None = None  # the run's record of the files it read (None: an older run)
        self.fallback_note: str | None = None
        self._index: dict[str, int] = {}
        self._thumbs: dict[str, bytes] = {}
        self.cache = ReportCache()  # this report's, kept between its rebuilds
        self._lock = threading.Lock()
        self._state: tuple = ()
        self.builds = 0
        self.last_build_s = 0.0
        self.page = b""
        self._build()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path, _, query = self.path.split("#", 1)[0].partition("?")
                refused = server.refusal(self.headers.get("Host"), query, self.headers.get("Cookie"))
                if refused:
                    return self._send(403, "text/plain", refused.encode())
                cookie = (f"{TOKEN_COOKIE}={server.token}; HttpOnly; SameSite=Strict; Path=/"
                          if server.token else None)
                if path in ("/", "/index.html", "/report.html"):
                    return self._send(200, "text/html; charset=utf-8", server.current_page(), cookie=cookie)
                if path.startswith("/image/"):
                    number = path[len("/image/"):]
                    if not (number.isascii() and number.isdigit()):  # /image/-1 is no image, not the last one
                        return self._send(404, "text/plain", b"not found")
                    try:  # only an image the run loaded: a file, or an image inside a parquet/arrow file
                        ctype, body = server.image(int(number))
                    except (ValueError, IndexError, OSError):
                        # the reason stays on the server: an error body names no path and no exception
                        return self._send(404, "text/plain", b"not found")
                    return self._send(200, ctype, body)
                if path.startswith("/thumb/"):
                    thumb = server._thumbs.get(path[len("/thumb/"):])
                    if thumb is None:
                        return self._send(404, "text/plain", b"not found")
                    # the key names the content: it never changes
                    return self._send(200, "image/jpeg", thumb, "public, max-age=31536000, immutable")
                if path == "/favicon.ico":  # the page has an inline icon; answer browsers that ask anyway
                    return self._send(204, "image/x-icon", b"")
                return self._send(404, "text/plain", b"not found")

            def _send(self, code: int, ctype: str, body: bytes, cache: str = "no-cache", cookie: str | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("X-Content-Type-Options", "nosniff")
                if cookie:
                    self.send_header("Set-Cookie", cookie)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", cache)  # a refresh must ask again: the report may have changed
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        bound = self.httpd.server_address[1]
        shown = f"[{host}]" if ":" in host else host  # an IPv6 address goes in brackets in a URL
        self.url = f"http://{shown}:{bound}/" + (f"?token={token}" if token else "")
        # the names this server answers to: its own address, never a name a web page chose
        self.hosts = own_hosts(host, bound)
        self._thread: threading.Thread | None = None

    def refusal(self, host: str | None, query: str, cookie: str | None) -> str | None:
        """Why a request is refused (``None``: served): a foreign Host, or no/wrong token."""
        import hmac
        from urllib.parse import parse_qs

        refused = host_refusal(host, self.hosts, "this report")
        if refused or self.token is None:
            return refused
        given = (parse_qs(query).get("token") or [""])[0]
        for part in (cookie or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == TOKEN_COOKIE and not given:
                given = value
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return "a token is required: open the URL `editlens view --token` printed"
        return None

    def image(self, n: int) -> tuple[str, bytes]:
        """``(content type, bytes)`` of image ``n``, when the run loaded it and it is still an image."""
        import io

        from PIL import Image, UnidentifiedImageError

        from editlens.core.embedded import parse_ref
        from editlens.reporting.thumbs import image_bytes
        from editlens.runner.store import resolved_image

        if not 0 <= n < len(self.images):
            raise IndexError(n)
        path = self.images[n]
        if path not in self._loaded:
            raise OSError("the run did not load this image")
        if self._recorded is not None:
            resolved = resolved_image(path)
            if resolved not in self._recorded:
                raise OSError("the run did not load this image")
            if parse_ref(path) is None:  # the file the run read, as it read it (a link swapped since is not followed)
                path = resolved
            # an image inside a table is read through its reference: the resolved table file may have no
            # table suffix (a hub cache's blob), and the checked table is what the reference opens
        found = image_bytes(path)
        if found is None:
            raise OSError("cannot be read")
        body = found[0]
        try:
            fmt = Image.open(io.BytesIO(body)).format
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
            raise OSError("not an image") from None
        ctype = Image.MIME.get(fmt or "")
        if not ctype or not ctype.startswith("image/"):
            raise OSError("not an image")
        return ctype, body

    def _watched_state(self) -> tuple:
        files = [self.run_dir / n for n in self.WATCHED]
        files += [Path(p) for p in (self.options.get("manifest"), self.options.get("human")) if p]
        out: list[tuple[str, int | None, int | None]] = []
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
        from editlens.reporting.html import _only_images_the_run_read, render_run_report
        from editlens.runner.store import recorded_images, resolved_image

        t0 = time.perf_counter()
        state = self._watched_state()
        data = collect_run(self.run_dir, manifest=self.options.get("manifest"), human=self.options.get("human"),
                           by=self.options.get("by"), cache=self.cache)
        self._recorded = recorded_images(self.run_dir)
        if self._recorded is not None:  # the run's own record of the files it decoded, row by row
            _only_images_the_run_read(self.run_dir, data)
        paths = sorted({p for s in data["samples"] for p in s["images"].values()})
        if self._recorded is not None:
            recorded = self._recorded
            self._loaded = {p for p in paths if resolved_image(p) in recorded}
        else:  # a run from before that record: a sample with a result other than failed had its images read
            self._loaded |= {p for s in data["samples"] if any(st != "failed" for st in s["statuses"])
                             for p in s["images"].values()}
            if self.fallback_note is None:
                self.fallback_note = (f"{self.run_dir}: this run has no record of the images it read (made before "
                                      "editlens recorded them); serving the images of samples with a result other "
                                      "than failed. Rerun into a new directory for the record.")
                sys.stderr.write(f"editlens view: {self.fallback_note}\n")
        for p in paths:
            if p not in self._index:
                self._index[p] = len(self.images)
                self.images.append(p)

        def thumb_url(t: Mapping[str, Any]) -> str:  # thumbnails are cached: only new images are decoded
            self._thumbs[t["key"]] = t["jpeg"]
            return f"/thumb/{t['key']}"

        # the report's own thumbnail size unless --thumb-size asked for one
        page = render_run_report(data, link=lambda p: f"/image/{self._index[p]}",
                                 thumb_size=self.options.get("thumb_size"), thumb_url=thumb_url, cache=self.cache)
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
