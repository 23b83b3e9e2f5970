"""Headless Chromium for the report tests and benchmark (Playwright, system browser).

Playwright's own browser download cannot work offline, so the system's
Chromium is used (Debian: ``apt-get install chromium``). Its path is
``$EDITLENS_CHROMIUM``, else the first of :data:`CANDIDATES` that exists.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from typing import Any, Iterator

CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str:
    """Path of the Chromium binary, or a clear error saying how to install it."""
    env = os.environ.get("EDITLENS_CHROMIUM")
    if env:
        if not os.path.isfile(env):
            raise RuntimeError(f"$EDITLENS_CHROMIUM={env} does not exist")
        return env
    for c in CANDIDATES:
        if os.path.isfile(c):
            return c
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    raise RuntimeError("Chromium is needed for the browser tests of the HTML report and was not found "
                       f"(looked at $EDITLENS_CHROMIUM, {', '.join(CANDIDATES)} and PATH). "
                       "Install it: `sudo apt-get install chromium` (Debian/Ubuntu), or point "
                       "$EDITLENS_CHROMIUM at a Chromium/Chrome binary.")


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000, allow: tuple[str, ...] = ()) -> Iterator[tuple[Any, list[str]]]:
    """``(page, errors)``: a Playwright page in headless system Chromium and the
    list that collects its console errors and uncaught page errors. ``allow``: URL prefixes the page may
    request (a served page's own server); any other request is an error."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise RuntimeError("the browser tests need Playwright: pip install 'editlens[test]'") from exc
    path = chromium_path()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            # a self-contained report must not fetch anything: any request other than data: URIs is an error
            page.on("request", lambda r: None if r.url.startswith(("data:", "file:", *allow)) else
                    errors.append(f"network request: {r.url}"))
            yield page, errors
        finally:
            browser.close()
