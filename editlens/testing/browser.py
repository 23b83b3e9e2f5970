"""Headless Chromium for the report tests and benchmark (Playwright, system browser).

Playwright's own browser download cannot work offline, so the system's
Chromium is used (Debian: ``apt-get install chromium``). Its path is
``$EDITLENS_CHROMIUM``, else the first of :data:`CANDIDATES` that exists.
"""

from __future__ import annotations

import atexit
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


#: this process's Chromium (:func:`_browser`): Playwright's driver, the browser, the binary it runs
_shared: dict[str, Any] = {}


def _close_shared() -> None:
    browser, driver = _shared.pop("browser", None), _shared.pop("driver", None)
    try:
        if browser is not None and browser.is_connected():
            browser.close()
    finally:
        if driver is not None:
            driver.stop()


def _browser(path: str) -> Any:
    """One headless Chromium per process, started on first use and closed at exit: starting Playwright's
    driver and a browser costs seconds, a page in a new context (its own storage, cookies and cache, as in a
    fresh browser) a fraction of one. A browser that crashed or was closed is started again."""
    browser = _shared.get("browser")
    if browser is not None and browser.is_connected() and _shared.get("path") == path:
        return browser
    _close_shared()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise RuntimeError("the browser tests need Playwright: pip install 'editlens[test]'") from exc
    driver = sync_playwright().start()
    try:
        browser = driver.chromium.launch(executable_path=path, args=ARGS, headless=True)
    except BaseException:
        driver.stop()
        raise
    _shared.update(driver=driver, browser=browser, path=path)
    if not _shared.get("closes_at_exit"):
        atexit.register(_close_shared)
        _shared["closes_at_exit"] = True
    return browser


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000, allow: tuple[str, ...] = ()) -> Iterator[tuple[Any, list[str]]]:
    """``(page, errors)``: a Playwright page in headless system Chromium (a new browser context in this
    process's browser) and the list that collects its console errors and uncaught page errors. ``allow``: URL
    prefixes the page may request (a served page's own server); any other request is an error."""
    context = _browser(chromium_path()).new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        # a self-contained report must not fetch anything: any request other than data: URIs is an error
        page.on("request", lambda r: None if r.url.startswith(("data:", "file:", *allow)) else
                errors.append(f"network request: {r.url}"))
        yield page, errors
    finally:
        context.close()
