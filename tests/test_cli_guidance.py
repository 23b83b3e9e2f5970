"""What the CLI tells a user: the Python judge API, typos caught before any
model loads, hints that work with today's tools, honest exit codes and CIs."""

import json

import numpy as np
import pytest
from fake_openai import FakeServer
from helpers import rng_image
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.errors import InputError, ModelUnavailableError, UnknownMetricError

runner = CliRunner()


def _pair(tmp_path):
    Image.fromarray(rng_image(0, 16, 16)).save(tmp_path / "s.png")
    Image.fromarray(rng_image(1, 16, 16)).save(tmp_path / "e.png")
    return tmp_path / "s.png", tmp_path / "e.png"


def test_python_judge_with_vlm_as_a_string(tmp_path):
    from editlens import score_edit

    src, edt = _pair(tmp_path)
    with FakeServer().running() as url:
        report = score_edit(str(src), str(edt), "add a hat", metrics=["viescore"], vlm=url)
    s = report["viescore"]
    assert s.status == "scored" and s.value == pytest.approx(np.sqrt(7 * 7) / 10) and s.details["SC"] == [8, 7]


def test_unknown_option_key_lists_valid_ones_before_loading(tmp_path):
    src, edt = _pair(tmp_path)
    # the --vlm folder does not exist: reaching the model would be a different error
    res = runner.invoke(app, ["score", "--source", str(src), "--edited", str(edt), "--instruction", "x",
                              "--judge", "viescore", "--vlm", str(tmp_path / "no-model"),
                              "--option", "viescore.max_tokens=64"])
    assert res.exit_code == 2
    assert "viescore has no option 'max_tokens'; its options are:" in res.output and "max_new_tokens" in res.output
    assert "no-model" not in res.output and "Traceback" not in res.output


def test_unknown_metric_in_option_names_known_metrics():
    from editlens.runner.selection import select_metrics

    with pytest.raises(UnknownMetricError, match=r"--option l3\.region: unknown metric 'l3'; known metrics: .*l1"):
        select_metrics(["l1"], options={"l3": {"region": "outside"}})
    res = runner.invoke(app, ["metrics"])  # sanity: the CLI still lists them
    assert res.exit_code == 0


def test_template_names_and_placeholders_are_checked(tmp_path):
    from editlens.runner.checks import check_templates

    good = tmp_path / "sc.txt"
    good.write_text("<<source>>\n<<edited>>\nDid the editor do \"$instruction\"? Reply as JSON.")
    check_templates({"viescore_sc": str(good)})
    with pytest.raises(InputError, match=r"no template named 'viescore_cs'; templates are: .*viescore_sc"):
        check_templates({"viescore_cs": str(good)})
    typo = tmp_path / "typo.txt"
    typo.write_text("<<source>>\n<<edited>>\nDid the editor do $instrution?")
    with pytest.raises(InputError, match=r"unknown placeholder\(s\) \$instrution; viescore_sc can use: \$instruction"):
        check_templates({"viescore_sc": str(typo)})
    marker = tmp_path / "marker.txt"
    marker.write_text("<<original>>\n$instruction")
    with pytest.raises(InputError, match=r"unknown image marker\(s\) <<original>>"):
        check_templates({"viescore_sc": str(marker)})
    src, edt = _pair(tmp_path)
    res = runner.invoke(app, ["score", "--source", str(src), "--edited", str(edt), "--instruction", "x",
                              "--judge", "viescore", "--vlm", str(tmp_path / "no-model"),
                              "--template", f"viescore_sc={typo}"])
    assert res.exit_code == 2 and "$instrution" in res.output


def test_offline_hub_id_fails_fast(monkeypatch):
    import time

    from transformers import AutoConfig

    from editlens.models import resolve

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no network to the hub
    monkeypatch.setattr(resolve, "_REACHABLE", {})
    monkeypatch.setattr(resolve, "_in_hub_cache", lambda ref: False)
    t0 = time.monotonic()
    with pytest.raises(ModelUnavailableError) as info:
        resolve.load_pretrained(AutoConfig, "someone/not-cached-model")
    assert time.monotonic() - t0 < 5
    msg = str(info.value)
    assert "cannot be reached" in msg and "hf download someone/not-cached-model" in msg


def test_lpips_skip_reason_names_file_and_source(tmp_path, monkeypatch):
    from editlens.metrics import lpips
    from editlens.metrics.availability import metric_availability
    from editlens.metrics.registry import get_spec

    monkeypatch.setattr(lpips, "heads_path", lambda net, version="0.1": None)
    ok, reason = metric_availability(get_spec("lpips"))
    assert not ok and "weights/v0.1/alex.pth" in reason and "pip install --no-deps lpips==0.1.4" in reason
    monkeypatch.setattr(lpips, "heads_path", lambda net, version="0.1": tmp_path / "alex.pth")
    monkeypatch.setattr(lpips, "backbone_path", lambda net: tmp_path / "alexnet-owt-7be5be79.pth")
    ok, reason = metric_availability(get_spec("lpips"))
    assert not ok and str(tmp_path / "alexnet-owt-7be5be79.pth") in reason
    assert "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth" in reason


def test_compare_exits_nonzero_without_a_verdict(tmp_path):
    src, edt = _pair(tmp_path)
    with FakeServer().running() as url:
        res = runner.invoke(app, ["compare", "--source", str(src), "--edited-a", str(edt), "--edited-b", str(src),
                                  "--instruction", "case:unparsable add a hat", "--vlm", url, "--cache", "none"])
    assert res.exit_code == 1 and "unscored" in res.output


def test_ci_over_one_value_is_undefined(tmp_path):
    from editlens.core.types import EditSample
    from editlens.metrics.registry import create_metric
    from editlens.reporting.runs import summary_table
    from editlens.runner.run import run_evaluation

    src, edt = _pair(tmp_path)
    run_evaluation([EditSample("a", str(src), str(edt), "x")], [create_metric("l1")], tmp_path / "run", progress=False)
    (row,) = summary_table(tmp_path / "run")
    assert row["n"] == 1 and row["ci"] is None
    res = runner.invoke(app, ["runs", "summary", str(tmp_path / "run")])
    assert "95% CI undefined (n < 2)" in res.output
    as_json = runner.invoke(app, ["runs", "summary", str(tmp_path / "run"), "--json"])
    assert json.loads(as_json.stdout)[0]["ci"] is None


def test_meta_eval_pointwise_labels_its_headline(tmp_path):
    human = tmp_path / "h.jsonl"
    pred = tmp_path / "p.jsonl"
    rows = [(m, i, h, p) for m, hs, ps in (("A", [0, 1, 2], [0.1, 0.5, 0.9]), ("B", [2, 1, 0], [0.9, 0.4, 0.2]))
            for i, (h, p) in enumerate(zip(hs, ps))]
    human.write_text("".join(json.dumps({"id": f"{m}/{i}", "model": m, "human": h}) + "\n" for m, i, h, _ in rows))
    pred.write_text("".join(json.dumps({"id": f"{m}/{i}", "score": p}) + "\n" for m, i, _, p in rows))
    res = runner.invoke(app, ["meta-eval", "pointwise", "--human", str(human), "--predictions", str(pred),
                              "--n-boot", "20"])
    assert res.exit_code == 0, res.output
    first, second = res.output.splitlines()[:2]
    assert first.startswith("aurora-pointwise (one Spearman rho over all items, as ADIEE's release): 0.9701 "
                            "(too few (n = 6, fewer than 10)) over 6 items")
    assert second.split()[:3] == ["global", "spearman", "0.9701"] and "too few (n = 6" in second
    assert res.output.splitlines()[2].split()[:4] == ["per", "model", "mean", "spearman"]


def test_score_with_a_judge_shows_progress(tmp_path, capsys):
    from editlens import score_edit

    src, edt = _pair(tmp_path)
    with FakeServer().running() as url:
        score_edit(str(src), str(edt), "add a hat", metrics=["l1", "viescore"], vlm=url, progress=True)
    err = capsys.readouterr().err
    assert "scoring" in err and "viescore" in err


def test_flag_hints_name_the_flag_used(tmp_path):
    src, edt = _pair(tmp_path)
    res = runner.invoke(app, ["score", "--source", str(src), "--edited", str(edt), "--instruction", "x",
                              "--judge", "viescore", "--vlm", "somewhere", "--template", "viescore_sc"])
    assert res.exit_code == 2 and "--template 'viescore_sc' must look like NAME=PATH" in res.output
    res = runner.invoke(app, ["serve", "--vlm", "http://127.0.0.1:8000/v1"])
    assert res.exit_code == 2 and "pass it as --vlm to score, run or compare" in res.output


def test_no_merge_conflict_markers_in_the_repository():
    """A README or module with a half-resolved merge reads as nonsense to a newcomer."""
    import re

    from helpers import REPO

    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)
    bad = []
    for folder in ("editlens", "tests", "benchmarks", "docs", "examples"):
        for p in (REPO / folder).rglob("*"):
            if p.suffix in {".py", ".md", ".txt", ".toml", ".json", ".jsonl", ".js", ".css", ".html"} and p.is_file():
                if marker.search(p.read_text(encoding="utf-8", errors="replace")):
                    bad.append(str(p.relative_to(REPO)))
    for name in ("README.md", "pyproject.toml"):
        if marker.search((REPO / name).read_text(encoding="utf-8")):
            bad.append(name)
    assert bad == []
