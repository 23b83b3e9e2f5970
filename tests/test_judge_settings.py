"""The judge block (``--vlm`` ... ``--timeout``, ``--max-retries``, ``--concurrency``) is one value passed
down to the evaluators and the backend factory: no process-wide HTTP default, nothing for a test to reset."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fake_openai import FakeServer
from typer.testing import CliRunner

from editlens.backends.factory import HttpSettings, create_backend
from editlens.cli.main import app
from editlens.runner.judge_settings import JudgeSettings, fetch_options
from editlens.runner.run import result_identity
from editlens.runner.selection import select_metrics

PACKAGE = Path(__file__).resolve().parent.parent / "editlens"


def _raw(backend):
    return getattr(backend, "backend", backend)


def test_http_settings_check_their_values():
    assert HttpSettings.of(None, None, None) == HttpSettings() == HttpSettings(120.0, 5, 8)
    assert HttpSettings.of(2, 0, None) == HttpSettings(2.0, 0, 8)
    for bad, flag in [({"timeout": 0}, "--timeout"), ({"timeout": float("nan")}, "--timeout"),
                      ({"max_retries": -1}, "--max-retries"), ({"concurrency": 0}, "--concurrency")]:
        with pytest.raises(ValueError, match=flag):
            HttpSettings(**bad)


def test_judge_options_are_as_before_unless_fetching_changes():
    opts = JudgeSettings("http://127.0.0.1:9/v1", cache="none", samples=3, temperature=0.7).vlm_options()
    assert opts == {"vlm": "http://127.0.0.1:9/v1", "vlm_model": None, "device": "auto", "dtype": "auto",
                    "templates": {}, "cache": False, "samples": 3, "temperature": 0.7}
    fetching = JudgeSettings("u", http=HttpSettings(timeout=2.0)).vlm_options()
    assert fetching is not None and fetching["http"] == {"timeout": 2.0, "max_retries": 5, "concurrency": 8}
    assert JudgeSettings().vlm_options() is None and fetch_options(None) is None
    with pytest.raises(Exception, match="temperature"):
        JudgeSettings("u", samples=2).vlm_options()  # sampling several answers needs a temperature
    # how answers are fetched keys no stored result
    described = {"name": "yes_no", "options": {"vlm": "u", "cache": True, "http": {"timeout": 2.0}}}
    assert result_identity(described) == {"name": "yes_no", "options": {"vlm": "u"}}


def test_each_backend_fetches_as_its_own_settings_say_and_none_leaks_into_the_next():
    with FakeServer().running() as url:
        quick = _raw(create_backend(url, cache=False, http=HttpSettings(timeout=2.0, max_retries=0, concurrency=3)))
        plain = _raw(create_backend(url, cache=False))
        as_mapping = _raw(create_backend(url, cache=False, http={"timeout": 2.0, "max_retries": 0, "concurrency": 3}))
    assert (quick.timeout, quick.max_retries, quick.concurrency) == (2.0, 0, 3)
    assert (plain.timeout, plain.max_retries, plain.concurrency) == (120.0, 5, 8)
    assert as_mapping is quick  # the same settings share the pooled backend


def test_a_judge_gets_the_settings_through_select_metrics():
    with FakeServer().running() as url:
        settings = JudgeSettings(url, cache="none", http=HttpSettings(timeout=3.0, max_retries=1, concurrency=2))
        (judge,) = select_metrics(["yes_no"], vlm=settings.vlm_options()).metrics
        raw = _raw(judge.backend)
        (plain,) = select_metrics(["yes_no"], vlm=JudgeSettings(url, cache="none").vlm_options()).metrics
        assert (raw.timeout, raw.max_retries, raw.concurrency) == (3.0, 1, 2)
        assert _raw(plain.backend).timeout == 120.0
        assert result_identity(judge.describe()) == result_identity(plain.describe())


def test_a_bad_timeout_is_a_usage_error_naming_the_flag(tmp_path):
    out = CliRunner().invoke(app, ["compare", "--source", "a.png", "--edited-a", "b.png", "--edited-b", "c.png",
                                   "--instruction", "x", "--vlm", "http://127.0.0.1:9/v1", "--timeout", "0"])
    assert out.exit_code == 2 and "--timeout must be a positive number" in out.output


def test_no_process_wide_http_default_is_left():
    names = {"HTTP_DEFAULTS", "set_http_defaults", "HTTP_BUILTIN"}
    found = []
    for path in [*PACKAGE.rglob("*.py"), *Path(__file__).parent.glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id in names or isinstance(node, ast.alias) and node.name in names:
                found.append(str(path))
    assert found == []


def test_the_judge_and_ray_blocks_are_declared_once_and_reach_each_command_whole():
    import typer

    from editlens.cli.options import JudgeBlockOpt, RayBlockOpt, judge_bundle

    root = typer.main.get_command(app)

    def options(path):
        cmd = root
        for part in path:
            cmd = cmd.commands[part]
        return {p.name: (p.opts, p.help, p.default) for p in cmd.params}

    def block(bundle):
        return {n: (list(opt.param_decls), opt.help, opt.default) for n, _, opt in bundle.params}

    for path, bundle in [(["score"], JudgeBlockOpt), (["run"], JudgeBlockOpt), (["compare"], JudgeBlockOpt),
                         (["arena"], judge_bundle(vlms=True)), (["edit"], RayBlockOpt), (["bench", "run"], RayBlockOpt)]:
        got = options(path)
        want = block(bundle)
        assert {n: (list(got[n][0]), got[n][1], got[n][2]) for n in want} == want, path
        assert "judging" not in got and "where" not in got


def test_a_command_receives_the_block_as_one_value(tmp_path):
    bad = CliRunner().invoke(app, ["edit", str(tmp_path / "m.jsonl"), "--editor", "x", "--out", str(tmp_path / "o"),
                                   "--address", "ray://h:1"])
    assert bad.exit_code == 2 and "go with --executor ray" in bad.output
    sampled = CliRunner().invoke(app, ["compare", "--source", "a.png", "--edited-a", "b.png", "--edited-b", "c.png",
                                       "--instruction", "x", "--vlm", "http://127.0.0.1:9/v1", "--samples", "3"])
    assert sampled.exit_code == 2 and "temperature" in sampled.output  # the settings check their sampling first
