"""The code examples in README.md and docs/*.md run as written.

Every fenced block whose info string is exactly ``python`` is executed from
the repository root, each page's blocks in order in one namespace (so a page
reads like a session). A block that needs what a test machine lacks (a
judge server, real weights) is fenced ``python skip`` and says why.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _pages_with_code() -> list[Path]:
    return [p for p in PAGES if BLOCK.search(p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda p: str(p.relative_to(REPO)))
def test_page_examples_run(page, monkeypatch, tmp_path):
    from editlens.metrics import registry

    registry._ensure_loaded()
    # a page may register an example evaluator: it lives for that page only
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("EDITLENS_DOCS_TMP", str(tmp_path))  # pages write their outputs here
    namespace: dict = {"__name__": "__docs__"}
    for i, code in enumerate(BLOCK.findall(page.read_text(encoding="utf-8")), 1):
        try:
            exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
        except Exception as exc:  # name the page and block, not this file
            pytest.fail(f"{page.relative_to(REPO)}, python block {i} failed: {type(exc).__name__}: {exc}")


def test_every_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, f"{page.name} is not linked from README.md"


def test_readme_stays_a_front_door():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200
