"""One writer of a bench folder: ``run_benchmark`` from Python and ``editlens bench run`` write the same
files (tables, items, both reports), and the result is typed by how the run ended."""

from __future__ import annotations

import json
import re

import bench_files as F
from test_bench_run import INSTRUCTIONS, ScoringServer
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.runner.bench import run_benchmark
from editlens.runner.bench_results import BenchEstimate, BenchTable

FILES = ["items.jsonl", "report.html", "run/report.html", "table.csv", "table.json", "table.md", "table.tex"]


def _folder(root):
    """The bench folder's files (not run/'s store), each with its own folder's path written as OUT."""
    found = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    keep = sorted(k for k in found if not k.startswith("run/") or k == "run/report.html")
    texts = {k: found[k].read_text(encoding="utf-8").replace(str(root.resolve()), "OUT").replace(str(root), "OUT")
             for k in keep}
    # the edits' report says when the run started and the command line that ran it (none from Python, the CLI's own)
    texts["run/report.html"] = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+\d{4}", "WHEN",
                                      re.sub(r"command <code>[^<]*</code>", "COMMAND", texts["run/report.html"]))
    return texts


def test_python_and_the_cli_write_the_same_bench_folder(tmp_path):
    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "good", ["k1", "k2", "k3", "k4"])
    with ScoringServer().running() as url:
        res = run_benchmark("gedit", data, tmp_path / "py", edits=edits, vlm=url, cache=False, n_boot=20,
                            progress=False)
        cli = CliRunner().invoke(app, ["bench", "run", "gedit", "--data", str(data), "--edits", str(edits),
                                       "--out", str(tmp_path / "cli"), "--vlm", url, "--cache", "none",
                                       "--n-boot", "20", "--no-progress", "--json"])
    assert cli.exit_code == 0, cli.output
    assert isinstance(res, BenchTable) and res.kind == "table" and res.exit == 0
    py, by_cli = _folder(tmp_path / "py"), _folder(tmp_path / "cli")
    assert sorted(py) == FILES and sorted(by_cli) == FILES
    for name in FILES:
        assert py[name] == by_cli[name], name
    # table.json is the result less what the run adds (files, exit); --json prints the whole result
    table = json.loads((tmp_path / "py" / "table.json").read_text())
    assert table == {k: v for k, v in json.loads(json.dumps(res.to_dict(), default=str)).items()
                     if k not in ("files", "exit")}
    printed = json.loads(cli.stdout)
    assert set(printed["files"]) == set(res.files) == {"json", "csv", "markdown", "latex", "items", "run_html", "html"}
    assert res["models"]["good"]["counts"] == printed["models"]["good"]["counts"]  # read as the mapping it was


def test_no_report_leaves_out_the_html_and_an_estimate_is_its_own_type(tmp_path):
    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    edits = tmp_path / "edits"
    F.gedit_outputs(edits, "good", ["k1", "k2"])
    with ScoringServer().running() as url:
        res = run_benchmark("gedit", data, tmp_path / "out", edits=edits, vlm=url, cache=False, n_boot=20,
                            progress=False, report=False)
        est = run_benchmark("gedit", data, tmp_path / "est", edits=edits, vlm=url, estimate_only=True, probe=False)
    assert set(res.files) == {"json", "csv", "markdown", "latex", "items"}
    assert not (tmp_path / "out" / "report.html").exists() and not (tmp_path / "out" / "run" / "report.html").exists()
    assert isinstance(est, BenchEstimate) and est.kind == "estimate" and est.judged
    assert est["edits_to_score"] == 2 and est.to_dict()["judge_calls"] > 0 and not (tmp_path / "est").exists()
