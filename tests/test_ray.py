"""The Ray executor on a local Ray: same results as the local executor."""

import json

import pytest

ray = pytest.importorskip("ray")

from test_runner import _dataset  # noqa: E402

from editlens.core.images import ImageLoadOptions  # noqa: E402
from editlens.metrics.registry import create_metric  # noqa: E402
from editlens.runner.executors import RayExecutor  # noqa: E402
from editlens.runner.run import run_evaluation  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _values(run_dir):
    return {r["id"]: {k: (v["status"], v["value"], v.get("reason")) for k, v in r["scores"].items()}
            for r in map(json.loads, open(run_dir / "results.jsonl"))}


def test_ray_matches_local_and_resumes(tmp_path, local_ray):
    samples = _dataset(tmp_path, n=10, broken={4})
    names = ["l1", "ssim", "change_map"]
    run_evaluation(samples, [create_metric(n) for n in names], tmp_path / "local", batch_size=3, progress=False)
    metrics = [create_metric(n) for n in names]
    ex = RayExecutor(metrics, ImageLoadOptions(), num_workers=2)
    res = run_evaluation(samples, metrics, tmp_path / "ray", batch_size=3, progress=False, executor=ex)
    assert res.computed == 30
    assert _values(tmp_path / "ray") == _values(tmp_path / "local")
    manifest = json.load(open(tmp_path / "ray" / "manifest.json"))
    assert manifest["executor"] == "ray"
    again = run_evaluation(samples, metrics, tmp_path / "ray", batch_size=3, progress=False,
                           executor=RayExecutor(metrics, ImageLoadOptions(), num_workers=1))
    # finished rows are reused; the broken sample's failed rows are retried (and fail again)
    assert again.computed == 3 and again.reused == 27


def test_cli_executor_ray(tmp_path, local_ray):
    from helpers import EXAMPLES
    from typer.testing import CliRunner

    from editlens.cli.main import app

    res = CliRunner().invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(tmp_path / "r"),
                                   "--metrics", "l1,change_map", "--executor", "ray", "--ray-workers", "2",
                                   "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0 and "10 results computed" in res.stdout
    assert json.load(open(tmp_path / "r" / "manifest.json"))["executor"] == "ray"
