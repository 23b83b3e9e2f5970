"""The command line, driven as a user would (typer's runner, real files)."""

import json

import pytest
from helpers import EXAMPLES, shared_path
from typer.testing import CliRunner

from editlens.cli.main import app

runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_metrics_json_lists_metadata():
    res = _invoke("metrics", "--json")
    assert res.exit_code == 0
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["ssim"]["available"] and rows["ssim"]["higher_is_better"]
    assert rows["clip_t"]["needs"] == ["edited", "target_caption"]


def test_score_json_is_stable(tmp_path):
    src = EXAMPLES / "images" / "cat_seat_source.png"
    edt = EXAMPLES / "images" / "cat_seat_edited.png"
    res = _invoke("score", "--source", src, "--edited", edt, "--instruction", "Put a cat on the seat.",
                  "--metrics", "l1,change_map", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema"] == "editlens.score/1"
    assert set(doc["scores"]) == {"l1", "change_map"}
    assert doc["scores"]["l1"]["status"] == "scored" and 0 < doc["scores"]["l1"]["value"] < 1
    assert doc["scores"]["change_map"]["details"]["regions"]


def test_score_with_tiny_clip_and_captions(tiny_clip_dir):
    src = EXAMPLES / "images" / "cat_seat_source.png"
    res = _invoke("score", "--source", src, "--edited", src, "--instruction", "noop", "--metrics", "clip_i,clip_t",
                  "--model", f"clip={tiny_clip_dir}", "--json")
    doc = json.loads(res.stdout)
    assert doc["scores"]["clip_i"]["value"] == pytest.approx(1.0, abs=1e-6)
    assert doc["scores"]["clip_t"]["status"] == "skipped" and "target caption" in doc["scores"]["clip_t"]["reason"]


@pytest.mark.parametrize("problem,needle", [("missing", "file not found"), ("text", "not an image")])
def test_bad_input_exits_2_with_message(tmp_path, problem, needle):
    bad = tmp_path / "bad.png"
    if problem == "text":
        bad.write_text("hello")
    res = runner.invoke(app, ["score", "--source", str(EXAMPLES / "images" / "cat_seat_source.png"),
                              "--edited", str(bad), "--instruction", "x", "--metrics", "l1"])
    assert res.exit_code == 2
    assert f"error: {bad}: {needle}" in res.output
    assert "Traceback" not in res.output


def test_empty_instruction_and_unknown_metric():
    src = str(EXAMPLES / "images" / "cat_seat_source.png")
    res = runner.invoke(app, ["score", "--source", src, "--edited", src, "--instruction", " "])
    assert res.exit_code == 2 and "empty instruction" in res.output
    res = runner.invoke(app, ["score", "--source", src, "--edited", src, "--instruction", "x", "--metrics", "clipp_i"])
    assert res.exit_code == 2 and "unknown metric 'clipp_i'" in res.output


def test_run_resume_and_runs_commands(tmp_path):
    out = tmp_path / "run"
    res = _invoke("run", EXAMPLES / "manifest.jsonl", "--out", out, "--metrics", "l1,ssim,change_map", "--no-progress")
    assert res.exit_code == 0 and "15 results computed, 0 reused" in res.stdout
    res = _invoke("run", EXAMPLES / "manifest.jsonl", "--out", out, "--metrics", "l1,ssim,change_map", "--no-progress",
                  "--export", "csv")
    assert "0 results computed, 15 reused" in res.stdout and (out / "results_long.csv").exists()
    records = [json.loads(x) for x in open(out / "results.jsonl")]
    noop = next(r for r in records if r["id"] == "cat_seat_noop")
    assert noop["scores"]["l1"]["value"] == 0.0 and noop["scores"]["change_map"]["details"]["regions"] == []
    show = json.loads(_invoke("runs", "show", out).stdout)
    assert [e["name"] for e in show["evaluators"]] == ["l1", "ssim", "change_map"]
    summ = json.loads(_invoke("runs", "summary", out, "--by", "model", "--json").stdout)
    groups = {(r["group"], r["evaluator"]): r for r in summ}
    assert groups[("no_op", "l1")]["mean"] == 0.0 and groups[("ground_truth", "l1")]["n"] == 4
    assert _invoke("runs", "failures", out, "--json").stdout.strip() == "[]"


def test_run_bad_manifest_lists_rows(tmp_path):
    m = tmp_path / "m.jsonl"
    m.write_text('{"id": "1", "source": "a.png", "edited": "b.png", "instruction": "x"}\n')
    res = runner.invoke(app, ["run", str(m), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "line 1: source file not found" in res.output


def test_meta_eval_pairwise_cli(tmp_path):
    (tmp_path / "p.jsonl").write_text('{"id": "a", "score": 0.9}\n{"id": "b", "score": 0.1}\n')
    (tmp_path / "h.jsonl").write_text('{"id": "x", "a": "a", "b": "b", "preference": "A"}\n')
    res = _invoke("meta-eval", "pairwise", "--human", tmp_path / "h.jsonl", "--predictions", tmp_path / "p.jsonl", "--json")
    assert json.loads(res.stdout)["accuracy"] == 1.0


@pytest.mark.integration
def test_meta_eval_imagenhub_cli():
    root = shared_path("benchmarks", "imagenhub_tie")
    res = _invoke("meta-eval", "imagenhub", "--ratings", root / "human_ratings",
                  "--judge-outputs", root / "judge_outputs" / "gpt4o_0shot", "--n-boot", "50", "--json")
    doc = json.loads(res.stdout)
    assert round(doc["value"], 4) == 0.3821 and doc["protocol"] == "imagenhub-official"
    assert set(doc["aspects"]) == {"O", "SC", "PQ"} and doc["n_unparsable"] == 0


def test_every_option_of_every_command_has_help():
    from typer.main import get_command

    from editlens.cli.main import app

    def walk(cmd, path, out):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name], out)
            return out
        for p in cmd.params:
            if getattr(p, "param_type_name", "") == "option" and not getattr(p, "hidden", False) and not p.help:
                out.append(f"editlens {' '.join(path)} {p.opts[0]}")
        return out

    assert walk(get_command(app), [], []) == []


def test_cli_choices_are_the_library_sets():
    """Each fixed-value option offers exactly the values the code behind it accepts (no typo reaches the work)."""
    from editlens.adiee.editor_prompt import BINNINGS, LEVEL_STYLES
    from editlens.adiee.model import HEADS
    from editlens.adiee.tune_data import SAMPLE_WEIGHTS, TARGET_WEIGHTS
    from editlens.cli import options as o
    from editlens.dice.evaluation import BOX_UNITS
    from editlens.dice.training import CROPS
    from editlens.editors.random_init import TINY_EDITORS
    from editlens.meta.calibration import METHODS
    from editlens.meta.protocols import AGGREGATIONS
    from editlens.models.random_init import BUILDERS
    from editlens.reporting.html import IMAGE_MODES
    from editlens.training.loop import DECAYS
    from editlens.twoframe.model import MODES
    from editlens.twoframe.train import OBJECTIVES

    def values(enum):
        return {m.value for m in enum}

    assert values(o.Binning) == set(BINNINGS) and values(o.LevelStyle) == set(LEVEL_STYLES)
    assert values(o.AdieeHead) == set(HEADS) and values(o.TargetWeights) == set(TARGET_WEIGHTS)
    assert values(o.SampleWeights) == set(SAMPLE_WEIGHTS)
    assert values(o.BoxUnits) == set(BOX_UNITS) and values(o.DiceCrop) == set(CROPS)
    assert values(o.TinyEditorFamily) == set(TINY_EDITORS) and values(o.TinyVlmFamily) == set(BUILDERS)
    assert values(o.CalibrationMethod) == set(METHODS) and values(o.ImagenHubProtocol) == set(AGGREGATIONS)
    assert values(o.PointwiseProtocol) == {"aurora", "aurora-per-model", *AGGREGATIONS}
    assert values(o.ReportImages) == set(IMAGE_MODES) and values(o.LrDecay) == set(DECAYS)
    assert values(o.TwoFrameMode) == set(MODES) and values(o.TwoFrameObjective) == set(OBJECTIVES)


def test_a_value_outside_a_choice_is_refused_before_any_work(tmp_path):
    r = _invoke("make-tiny-editor", str(tmp_path / "e"), "--family", "instruct-pix3pix")
    assert r.exit_code == 2 and "instruct-pix2pix" in r.output and not (tmp_path / "e").exists()
    member = _invoke("twoframe", "random-model", "--help")
    assert "vit-b-16" in member.output


def test_only_the_named_dependency_warnings_are_dropped(caplog):
    import logging

    from editlens.cli.main import IRRELEVANT_WARNINGS, quiet_irrelevant_warnings

    quiet_irrelevant_warnings()
    quiet_irrelevant_warnings()  # once per logger, however often a command starts
    for name, part in IRRELEVANT_WARNINGS:
        log = logging.getLogger(name)
        assert len(log.filters) == 1
        with caplog.at_level(logging.WARNING, logger=name):
            caplog.clear()
            log.warning("x %s y", part)
            log.warning("something else went wrong")
        assert [r.getMessage() for r in caplog.records] == ["something else went wrong"]
