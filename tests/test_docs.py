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
    from contextlib import ExitStack

    from editlens.bench.registry import BENCHMARKS
    from editlens.editors.registry import EDITORS
    from editlens.metrics.registry import METRICS

    # a page may register an example evaluator, editor or benchmark: it lives for that page only
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("EDITLENS_DOCS_TMP", str(tmp_path))  # pages write their outputs here
    namespace: dict = {"__name__": "__docs__"}
    with ExitStack() as isolated:
        for registry in (METRICS, EDITORS, BENCHMARKS):
            isolated.enter_context(registry.isolated())
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


# ---------------------------------------------------------------------------------------- shell examples
# Every ``bash`` block's editlens commands name real commands and options (checked against the CLI);
# blocks fenced ``bash`` run as written in a fresh folder holding the sample edits (`editlens demo
# --copy-samples examples`), offline. A block that needs what a test machine lacks (real weights, a
# GPU, a judge server) is fenced ``bash no-run`` and its first line says why; it is still checked.
SHELL_BLOCK = re.compile(r"^```bash( no-run)?\n(.*?)^```", re.S | re.M)


def _shell_pages() -> list[Path]:
    return [p for p in PAGES if SHELL_BLOCK.search(p.read_text(encoding="utf-8"))]


def _editlens_commands(script: str) -> list[list[str]]:
    import shlex

    out = []
    for line in script.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise AssertionError(f"cannot parse {line!r}: {exc}") from None
        command: list[str] = []
        for w in [*words, "&&"]:
            if w in ("&&", "||", "|", ";"):
                if command and Path(command[0]).name == "editlens":
                    out.append(command[1:])
                command = []
            else:
                command.append(w)
    return out


def _check_against_cli(args: list[str]) -> str | None:
    """Why ``editlens ARGS`` names no real command or option (``None`` when it does)."""
    from typer.main import get_command

    from editlens.cli.main import app

    cmd, i = get_command(app), 0
    # ("..." stands for arguments left out)
    while hasattr(cmd, "commands") and i < len(args) and not args[i].startswith("-") and args[i] != "...":
        if args[i] not in cmd.commands:
            default = getattr(cmd, "default_command", None)  # a group whose first word may be its command's argument
            if default is None:
                return f"no command {' '.join(args[: i + 1])!r}"
            cmd = cmd.commands[default]
            break
        cmd, i = cmd.commands[args[i]], i + 1
    names = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", []))} | {"--help"}
    unknown = [a.split("=")[0] for a in args[i:] if a.startswith("--") and a.split("=")[0] not in names]
    return f"{' '.join(args[:i])}: no option {unknown}" if unknown else None


#: pages whose runnable blocks another test runs as written (the names are still checked here): the
#: quickstart from the built wheel in a fresh venv (tests/test_quickstart_loop.py); running it twice costs
#: a minute and a half of CI
RUN_AS_WRITTEN_ELSEWHERE = {"docs/quickstart-loop.md"}


@pytest.mark.parametrize("page", _shell_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_page_shell_examples_name_real_commands_and_run(page, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "EDITLENS_CACHE_DIR": str(tmp_path / "cache")}
    subprocess.run(["editlens", "demo", "--copy-samples", "examples"], cwd=tmp_path, env=env, check=True,
                   capture_output=True)
    for k, (no_run, script) in enumerate(SHELL_BLOCK.findall(page.read_text(encoding="utf-8")), 1):
        where = f"{page.relative_to(REPO)}, bash block {k}"
        for args in _editlens_commands(script):
            problem = _check_against_cli(args)
            assert problem is None, f"{where}: {problem}"
        if no_run:
            assert script.lstrip().startswith("#"), f"{where}: a no-run block says why on its first line"
            continue
        if str(page.relative_to(REPO)) in RUN_AS_WRITTEN_ELSEWHERE:
            continue
        res = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, f"{where} failed (exit {res.returncode}):\n{res.stdout[-1500:]}\n{res.stderr[-3000:]}"
