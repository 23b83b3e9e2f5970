"""A new evaluator is one declaration: its spec tells the CLI, the runner, comparisons, summaries and the
report everything they need (no surface knows it by name)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from editlens.core.types import Score
from editlens.metrics.base import Metric
from editlens.metrics.spec import BoxLayer, MetricSpec


class Greener(Metric):
    """How much greener the edit is than the source (a toy 'quality' score), with the greenest quarter boxed."""

    def compute(self, batch):
        out = []
        for s in batch:
            gain = float(s.edited[..., 1].mean() - s.source[..., 1].mean()) / 255.0
            out.append(Score(self.name, gain, details={"patches": [{"box": [0.5, 0.5, 1.0, 1.0], "gain": gain}],
                                                       "green": gain, "other": 0.0}))
        return out


SPEC = MetricSpec("greener", Greener, ("source", "edited"), True, (-1.0, 1.0), None, "greener than the source",
                  measures="quality", sub_scores=("green",),
                  boxes=BoxLayer("patches", name="green patches", label="{gain:.2f}", rank="gain"))


@pytest.fixture
def greener():
    from editlens.metrics import registry

    with registry.METRICS.isolated():
        registry.register_metric(SPEC)
        yield SPEC


def _edits(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    src = rng.integers(0, 200, (48, 64, 3), dtype=np.uint8)
    rows = []
    for model, add in (("green_editor", 40), ("grey_editor", 0)):
        img = src.copy()
        img[..., 1] = np.clip(img[..., 1].astype(int) + add, 0, 255)
        Image.fromarray(img).save(tmp_path / f"{model}.png")
        rows.append({"id": f"e_{model}", "source": "src.png", "edited": f"{model}.png", "instruction": "make it green",
                     "model": model})
    Image.fromarray(src).save(tmp_path / "src.png")
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "m.jsonl"


def test_one_spec_reaches_every_surface(greener, tmp_path):
    from editlens.cli.main import app

    cli = CliRunner()
    listed = cli.invoke(app, ["metrics", "--json"])
    assert listed.exit_code == 0 and any(m["name"] == "greener" for m in json.loads(listed.output))
    manifest = _edits(tmp_path)
    run = cli.invoke(app, ["run", str(manifest), "--out", str(tmp_path / "r"), "--metrics", "greener", "--no-progress"])
    assert run.exit_code == 0, run.output
    rows = {r["model"]: r for r in map(json.loads, (tmp_path / "r" / "results.jsonl").read_text().splitlines())}
    assert rows["green_editor"]["scores"]["greener"]["value"] > 0.1 > rows["grey_editor"]["scores"]["greener"]["value"]
    # comparisons decide by the declared direction and list the declared sub-scores
    cmp = cli.invoke(app, ["compare", "--source", str(tmp_path / "src.png"), "--edited-a", str(tmp_path / "grey_editor.png"),
                           "--edited-b", str(tmp_path / "green_editor.png"), "--instruction", "make it green",
                           "--metric", "greener", "--json"])
    assert cmp.exit_code == 0, cmp.output
    verdict = json.loads(cmp.output)
    verdict = verdict[0] if isinstance(verdict, list) else verdict
    assert verdict["verdict"] == "B>A" and set(verdict["sub_scores"]) == {"green"}
    # the run summary ranks by it (a quality measure), and the report draws its boxes under its layer name
    summary = cli.invoke(app, ["runs", "summary", str(tmp_path / "r"), "--by", "model"])
    assert summary.exit_code == 0 and "greener" in summary.output
    report = cli.invoke(app, ["report", str(tmp_path / "r")])
    assert report.exit_code == 0, report.output
    html = (tmp_path / "r" / "report.html").read_text()
    assert "green patches" in html and "greener" in html
