"""Generation on Ray (`edit --executor ray`): two local CPU workers make the same image bytes and manifest
rows as one process; a worker killed mid-batch has its batch redone by another; resume as today.
Ray is started once for the module, with 2 CPUs."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from test_editors import FAST, SCRIPTED, cli, digests, rows, write_inputs  # noqa: E402

#: one worker should run this module's tests (they share its Ray cluster). NB: with pytest 9 + pytest-xdist 3.8
#: xdist_group has no effect (xdist renames item._nodeid, pytest 9 reads item._id): each worker that gets one
#: of these tests starts its own cluster, as before this mark
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_ip2p(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from editlens.testing.tiny_editors import make_tiny_editor

    return make_tiny_editor(tmp_path_factory.mktemp("editor") / "ip2p", "instruct-pix2pix", image_size=32)


@contextmanager
def threads(n: int):
    """torch's CPU threads in this process: a CPU sum split over other threads rounds its last bit
    otherwise, so the one-process reference computes with the one thread each Ray CPU worker has."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _log(out: Path) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k != "seconds"} for r in rows(out / "generations.jsonl")),
                  key=lambda r: (r["edit_id"], r["sample"]))


def test_edit_on_two_ray_workers_matches_one_process(tiny_ip2p, tmp_path, local_ray):
    manifest = write_inputs(tmp_path, 4)
    one, spread = tmp_path / "one", tmp_path / "ray"
    with threads(1):
        r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", one, "--samples", "2", "--batch-size", "2", *FAST)
    assert r.exit_code == 0, r.output
    r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", spread, "--samples", "2", "--batch-size", "2",
            "--executor", "ray", "--workers", "2", *FAST)
    assert r.exit_code == 0, r.output
    assert digests(spread) == digests(one)  # byte-identical images
    assert rows(spread / "manifest.jsonl") == rows(one / "manifest.jsonl")  # same rows, same order
    assert _log(spread) == _log(one)
    a, b = (json.loads((d / "editor.json").read_text()) for d in (spread, one))
    assert (a["settings"], a["weights"], a["seed"]) == (b["settings"], b["weights"], b["seed"])
    assert a["runtime"]["executor"] == "ray" and a["runtime"]["workers"] == 2
    # resume as today: a rerun on Ray keeps every image; other settings are refused
    r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", spread, "--samples", "2", "--executor", "ray",
            "--workers", "1", *FAST)
    assert r.exit_code == 0 and "0 images generated, 8 kept" in r.output
    r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", spread, "--samples", "2", "--executor", "ray",
            "--workers", "1", "--editor-option", "steps=3", "--editor-option", "resolution=32", "--no-progress")
    assert r.exit_code == 2 and "other settings" in r.output


def test_a_killed_worker_has_its_batch_redone_elsewhere(tmp_path, local_ray):
    """The scripted editor SIGKILLs the worker process that reaches edit e2 the first time (a marker file
    says it happened); the driver gives that batch to another worker, and every image is made once."""
    from editlens.runner.edit import generate_edits
    from editlens.runner.executors import RayEditors

    manifest = write_inputs(tmp_path, 6)
    one = tmp_path / "one"
    assert cli("edit", manifest, "--editor", SCRIPTED, "--out", one, "--no-progress").exit_code == 0
    marker = tmp_path / "killed"
    editors = RayEditors("editlens.testing.tiny_editors:crash_once_editor", {"kill_at": "e2", "marker": str(marker)},
                         num_workers=2)
    try:
        pids = set(editors.worker_pids())
        res = generate_edits(manifest, editors, tmp_path / "ray", batch_size=1, progress=False)
        assert editors.deaths == 1 and marker.read_text() in {str(p) for p in pids}  # a worker really died
        assert set(editors.worker_pids()) != pids  # and was replaced
    finally:
        editors.close()
    assert (res.generated, res.failed) == (6, 0)
    assert digests(tmp_path / "ray") == digests(one)
    assert [r["edit_id"] for r in rows(tmp_path / "ray" / "generations.jsonl")].count("e2") == 1


def test_a_bad_editor_on_ray_says_why(tmp_path, local_ray):
    manifest = write_inputs(tmp_path, 1)
    r = cli("edit", manifest, "--editor", "editlens.testing.tiny_editors:no_such_editor", "--out", tmp_path / "o",
            "--executor", "ray", "--workers", "1", "--no-progress")
    assert r.exit_code == 2 and "no_such_editor" in r.output
    r = cli("edit", manifest, "--editor", SCRIPTED, "--out", tmp_path / "o", "--workers", "2", "--no-progress")
    assert r.exit_code == 2 and "--executor ray" in r.output


def test_best_of_n_and_run_generate_on_ray_as_in_one_process(tmp_path, local_ray):
    manifest = write_inputs(tmp_path, 3)
    picks = []
    for name, extra in (("one", []), ("ray", ["--executor", "ray", "--workers", "2"])):
        r = cli("best-of-n", manifest, "--editor", SCRIPTED, "--samples", "2", "--metric", "psnr", "--edits-out",
                tmp_path / f"bon-{name}", "--json", *extra)
        assert r.exit_code == 0, r.output
        picks.append(json.loads(r.stdout[r.stdout.index("{"):])["picks"])
    assert [p["best_value"] for p in picks[0]] == [p["best_value"] for p in picks[1]]
    assert digests(tmp_path / "bon-ray") == digests(tmp_path / "bon-one")
    r = cli("run", manifest, "--editor", SCRIPTED, "--edit-samples", "2", "--metrics", "psnr", "--out",
            tmp_path / "run-ray", "--executor", "ray", "--ray-workers", "2", "--no-progress")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "run-ray" / "edits" / "editor.json").read_text())["runtime"]["executor"] == "ray"
    assert digests(tmp_path / "run-ray" / "edits") == digests(tmp_path / "bon-one")


def test_a_sigkilled_ray_driver_loses_only_images_in_flight_and_a_rerun_resumes(tmp_path, local_ray):
    """The driver (`editlens edit --executor ray` on this module's Ray) is SIGKILLed half-way: every image it
    logged is kept, none is listed twice, and a rerun makes the rest; the folder equals one process's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    manifest = write_inputs(tmp_path, 8)
    one = tmp_path / "one"
    assert cli("edit", manifest, "--editor", SCRIPTED, "--out", one, "--no-progress").exit_code == 0
    out = tmp_path / "ray"
    args = ["edit", str(manifest), "--editor", "editlens.testing.tiny_editors:slow_editor", "--out", str(out),
            "--editor-option", "seconds=1.0", "--batch-size", "1", "--executor", "ray", "--workers", "2",
            "--address", ray.get_runtime_context().gcs_address, "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path.cwd()), os.environ.get("PYTHONPATH"))
                                                       if p)}
    proc = subprocess.Popen([sys.executable, "-m", "editlens.cli.main", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    log = out / "generations.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if log.is_file() and len(log.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = rows(log)
    assert 2 <= len(kept) < 8 and len({(r["edit_id"], r["sample"]) for r in kept}) == len(kept)
    r = cli(*args)
    assert r.exit_code == 0, r.output
    assert f"{8 - len(kept)} images generated, {len(kept)} kept" in r.output
    assert digests(out) == digests(one)
    assert ([{k: v for k, v in x.items() if k != "model"} for x in rows(out / "manifest.jsonl")]
            == [{k: v for k, v in x.items() if k != "model"} for x in rows(one / "manifest.jsonl")])  # its name aside
