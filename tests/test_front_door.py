"""A user's first minutes: the version, the demo on the samples shipped in the package, the wheel's contents."""

import json
import subprocess
import zipfile

import pytest
from helpers import REPO
from typer.testing import CliRunner

from editlens.cli.main import app


def test_version_prints_the_package_version():
    import editlens

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"editlens {editlens.__version__}"


def test_demo_runs_the_main_job_on_the_packaged_samples_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no checkout around: the samples come from the package
    res = CliRunner().invoke(app, ["demo", "--out", "demo"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "demo" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 5
    assert all(r["scores"]["change_map"]["status"] == "scored" for r in rows)
    noop = next(r for r in rows if r["id"] == "cat_seat_noop")
    assert noop["scores"]["l1"]["value"] == 0.0  # the no-op sample is the source itself
    assert (tmp_path / "demo" / "report.html").stat().st_size > 10_000


def test_copy_samples_makes_the_docs_paths_real(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(app, ["demo", "--copy-samples", "examples"]).exit_code == 0
    manifest = [json.loads(line) for line in (tmp_path / "examples" / "manifest.jsonl").read_text().splitlines()]
    assert all((tmp_path / "examples" / row["edited"]).is_file() for row in manifest)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    res = CliRunner().invoke(app, ["demo", "--copy-samples", "other"])
    assert res.exit_code == 2 and "not an editlens samples folder" in res.output


@pytest.mark.slow
@pytest.mark.once
def test_the_wheel_installed_in_a_fresh_venv_runs_the_demo_from_an_empty_folder(wheel_venv, tmp_path):
    """The README's user path: `pip install editlens` (the wheel), then `editlens demo`, no checkout around."""
    import os

    wheel, fresh_python, fresh_site = wheel_venv  # tests/conftest.py: built and installed once per session
    names = set(zipfile.ZipFile(wheel).namelist())
    package_data = [p.relative_to(REPO).as_posix() for p in (REPO / "editlens").rglob("*")
                    if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts]
    assert "editlens/samples/manifest.jsonl" in package_data
    assert sorted(set(package_data) - names) == []

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(fresh_python), "-c", "import editlens; print(editlens.__file__)"], cwd=empty, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert where.startswith(fresh_site), where
    cli = fresh_python.parent / "editlens"
    version = subprocess.run([str(cli), "--version"], cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout.startswith("editlens "), version.stderr
    demo = subprocess.run([str(cli), "demo", "--out", "demo"], cwd=empty, env=env, capture_output=True, text=True,
                          timeout=600)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    rows = [json.loads(line) for line in (empty / "demo" / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(r["scores"]["change_map"]["status"] == "scored" for r in rows)
    assert (empty / "demo" / "report.html").stat().st_size > 10_000


def test_missing_inputs_and_models_say_how_to_get_them(tmp_path):
    import numpy as np

    from editlens import EditSample, create_metric
    from editlens.metrics.availability import metric_availability
    from editlens.metrics.registry import get_spec
    from editlens.models.resolve import ModelRef, unavailable_message

    img = np.zeros((32, 32, 3), np.uint8)
    skipped = create_metric("clip_t").missing(EditSample("x", img, img, "add a cat").load())
    assert "--captions --vlm" in skipped
    ok, why = metric_availability(get_spec("viescore"), options={})
    assert not ok and "--vlm DIR" in why and "--vlm URL --vlm-model NAME" in why
    ok, why = metric_availability(get_spec("clip_i"), models={"clip": "someone/not-cached-clip"})
    assert not ok and "`hf download someone/not-cached-clip`" in why and "--model clip=DIR" in why
    # a hub id given straight to --vlm has no role: the fix names the flag, not --model ROLE=DIR
    text = unavailable_message(ModelRef(ref="someone/vlm", role=None, origin="--vlm"), "offline")
    assert "--vlm DIR" in text and "ROLE" not in text


def test_a_missing_hub_model_says_what_to_do_without_the_hub_clients_exception(monkeypatch, tmp_path):
    from editlens.errors import ModelUnavailableError
    from editlens.models.vlm import locate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(ModelUnavailableError) as err:
        locate("someone/released-model/stage1", "detector")
    text = str(err.value)
    assert "`hf download someone/released-model`" in text and "stage1" in text
    assert "LocalEntryNotFoundError" not in text and "Errno" not in text
