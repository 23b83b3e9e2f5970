"""Byte-identical guard of every `editlens meta-eval` command and `editlens calibrate`.

Each case runs a command with ``--json`` (and ``--report`` where it has one) on the fixtures
of :mod:`meta_fixtures` (always) or on ../shared (skipped without it) and compares its output,
byte for byte, with tests/golden/meta/<case>.json; the HTML report and the files a command
writes (a calibration map, a prepared folder) are compared the same way. Paths are the only
thing normalised: the fixture folder reads ``$ROOT`` and ../shared ``$SHARED`` in the goldens.
The goldens were written by the code before human-label benchmarks moved to ``bench/``;
``EDITLENS_UPDATE_GOLDEN=1`` rewrites them (only do that for a change of output you mean).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from helpers import SHARED, shared_path
from meta_fixtures import write_all
from typer.testing import CliRunner

from editlens.cli.main import app

GOLDEN = Path(__file__).parent / "golden" / "meta"
IH = "$SHARED/benchmarks/imagenhub_tie"

#: case -> (argv with $ROOT / $SHARED, files the command writes under $ROOT/out that are compared too)
CASES: dict[str, tuple[list[str], list[str]]] = {
    "imagenhub-judge": (["meta-eval", "imagenhub", "--ratings", "$ROOT/ih/ratings", "--judge-outputs", "$ROOT/ih/judge",
                         "--n-boot", "40"], []),
    "imagenhub-preds-fisher": (["meta-eval", "imagenhub", "--ratings", "$ROOT/ih/ratings", "--predictions",
                                "$ROOT/ih/preds.jsonl", "--protocol", "fisher", "--n-boot", "40", "--seed", "3"], []),
    "genai-bench": (["meta-eval", "genai-bench", "--judge-outputs", "$ROOT/genai/genai.json"], []),
    "pointwise-aurora": (["meta-eval", "pointwise", "--human", "$ROOT/pw/human.jsonl", "--predictions",
                          "$ROOT/pw/results.jsonl", "--metric", "j", "--n-boot", "40", "--by", "task_type"], []),
    "pointwise-official": (["meta-eval", "pointwise", "--human", "$ROOT/pw/human.jsonl", "--predictions",
                            "$ROOT/pw/results.jsonl", "--metric", "k", "--protocol", "official", "--n-boot", "40"], []),
    "pairwise-scores": (["meta-eval", "pairwise", "--human", "$ROOT/pw/pairs.jsonl", "--predictions",
                         "$ROOT/pw/results.jsonl", "--metric", "j"], []),
    "pairwise-verdicts": (["meta-eval", "pairwise", "--human", "$ROOT/pw/pairs.jsonl", "--verdicts",
                           "$ROOT/pw/verdicts.jsonl"], []),
    "prepare-editscore-bench": (["meta-eval", "prepare", "editscore-bench", "$ROOT/rb/es", "--out", "$ROOT/out/p"],
                                ["p/manifest.jsonl", "p/pairs.jsonl", "p/benchmark.json"]),
    "prepare-editreward-bench": (["meta-eval", "prepare", "editreward-bench", "$ROOT/rb/er", "--out", "$ROOT/out/p"],
                                 ["p/manifest.jsonl", "p/pairs.jsonl", "p/benchmark.json"]),
    "prepare-mmrb2": (["meta-eval", "prepare", "mmrb2", "$ROOT/rb/mm/edit.json", "--out", "$ROOT/out/p",
                       "--multi-input", "first"], ["p/manifest.jsonl", "p/pairs.jsonl", "p/benchmark.json"]),
    "editscore-bench": (["meta-eval", "editscore-bench", "--bench", "$ROOT/rb/editscore-bench-prep", "--predictions",
                         "$ROOT/rb/editscore-bench-results.jsonl", "--metric", "m"], []),
    "editscore-bench-published": (["meta-eval", "editscore-bench", "--bench", "$ROOT/rb/es", "--predictions",
                                   "$ROOT/rb/editscore-bench-results.jsonl", "--metric", "m"], []),
    "editreward-bench": (["meta-eval", "editreward-bench", "--bench", "$ROOT/rb/editreward-bench-prep", "--predictions",
                          "$ROOT/rb/editreward-bench-results.jsonl", "--metric", "m"], []),
    "mmrb2-scores": (["meta-eval", "mmrb2", "--bench", "$ROOT/rb/mmrb2-prep", "--predictions",
                      "$ROOT/rb/mmrb2-results.jsonl", "--metric", "m"], []),
    "mmrb2-verdicts": (["meta-eval", "mmrb2", "--bench", "$ROOT/rb/mmrb2-prep", "--verdicts",
                        "$ROOT/rb/mmrb2-verdicts.jsonl"], []),
    "arena": (["meta-eval", "arena", "$ROOT/arena", "--human-ranking", "$ROOT/arena/human.json"], []),
    "calibrate-imagenhub": (["calibrate", "imagenhub", "--ratings", "$ROOT/ih/ratings", "--predictions",
                             "$ROOT/ih/preds.jsonl", "--metric", "score", "--out", "$ROOT/out/cal.json",
                             "--folds", "3"], ["cal.json"]),
    "calibrate-pointwise": (["calibrate", "pointwise", "--human", "$ROOT/pw/human.jsonl", "--predictions",
                             "$ROOT/pw/results.jsonl", "--metric", "j,k", "--out", "$ROOT/out/cal.json",
                             "--method", "platt"], ["cal.json"]),
    "calibrate-pointwise-good-at": (["calibrate", "pointwise", "--human", "$ROOT/pw/human.jsonl", "--predictions",
                                     "$ROOT/pw/results.jsonl", "--metric", "j", "--good-at", "0.5", "--out",
                                     "$ROOT/out/cal.json"], ["cal.json"]),
    "calibrate-pairwise": (["calibrate", "pairwise", "--human", "$ROOT/pw/pairs.jsonl", "--predictions",
                            "$ROOT/pw/results.jsonl", "--metric", "j", "--out", "$ROOT/out/cal.json", "--folds", "3"],
                           ["cal.json"]),
    # ../shared: ImagenHub's human ratings and GPT-4o's VIEScore answers as published
    "shared-imagenhub-judge": (["meta-eval", "imagenhub", "--ratings", f"{IH}/human_ratings", "--judge-outputs",
                                f"{IH}/judge_outputs/gpt4o_0shot", "--n-boot", "20"], []),
    "shared-calibrate-imagenhub": (["calibrate", "imagenhub", "--ratings", f"{IH}/human_ratings", "--judge-outputs",
                                    f"{IH}/judge_outputs/gpt4o_0shot", "--out", "$ROOT/out/cal.json"], ["cal.json"]),
}
#: commands without --report
NO_REPORT = ("prepare-",)


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("meta-golden")
    write_all(root)
    return root


def _norm(text: str, root: Path) -> str:
    text = text.replace(str(root.resolve()), "$ROOT").replace(str(root), "$ROOT")
    return text.replace(str(SHARED.resolve()), "$SHARED").replace(str(SHARED), "$SHARED")


def run_case(argv: list[str], root: Path, out: Path, report: bool) -> tuple[str, str | None]:
    """The command's JSON (paths normalised) and its report's HTML (or ``None``)."""
    args = [a.replace("$ROOT/out", str(out)).replace("$ROOT", str(root)).replace("$SHARED", str(SHARED)) for a in argv]
    html = out / "report.html"
    if report:
        args += ["--report", str(html)]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return _norm(res.stdout, root), (_norm(html.read_text(encoding="utf-8"), root) if report else None)


def compare(name: str, got: str, suffix: str = ".json") -> None:
    path = GOLDEN / f"{name}{suffix}"
    if os.environ.get("EDITLENS_UPDATE_GOLDEN") == "1":
        path.write_text(got, encoding="utf-8")
    assert path.is_file(), f"{path}: no golden (EDITLENS_UPDATE_GOLDEN=1 writes it)"
    assert got == path.read_text(encoding="utf-8"), f"{name}{suffix} differs from its golden"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest() + "\n"


@pytest.mark.parametrize("name", sorted(CASES))
def test_meta_eval_output_is_byte_identical(name: str, fixtures: Path, tmp_path: Path) -> None:
    argv, files = CASES[name]
    if name.startswith("shared-"):
        shared_path("benchmarks", "imagenhub_tie")
    out = _fresh_out(fixtures)
    got, html = run_case(argv, fixtures, out, not name.startswith(NO_REPORT))
    compare(name, got)
    if html is not None:
        compare(name, sha(html), ".report.sha256")
    for f in files:
        compare(f"{name}.{Path(f).name}", _norm((out / f).read_text(encoding="utf-8"), fixtures))


#: the same meta-evaluations through `meta-eval run NAME` and `calibrate run NAME`: old case -> new argv
RUN_CASES: dict[str, list[str]] = {
    "imagenhub-judge": ["meta-eval", "run", "imagenhub", "--data", "$ROOT/ih/ratings", "--predictions", "$ROOT/ih/judge",
                        "--n-boot", "40"],
    "imagenhub-preds-fisher": ["meta-eval", "run", "imagenhub", "--data", "$ROOT/ih/ratings", "--predictions",
                               "$ROOT/ih/preds.jsonl", "--protocol", "imagenhub-fisher", "--n-boot", "40", "--seed", "3"],
    "genai-bench": ["meta-eval", "run", "genai-bench", "--data", "$ROOT/genai/genai.json"],
    "pointwise-aurora": ["meta-eval", "run", "aurora", "--data", "$ROOT/pw/human.jsonl", "--predictions",
                         "$ROOT/pw/results.jsonl", "--metric", "j", "--n-boot", "40", "--by", "task_type"],
    "pointwise-official": ["meta-eval", "run", "aurora", "--data", "$ROOT/pw/human.jsonl", "--predictions",
                           "$ROOT/pw/results.jsonl", "--metric", "k", "--protocol", "official", "--n-boot", "40"],
    "pairwise-scores": ["meta-eval", "run", "aurora", "--data", "$ROOT/pw/pairs.jsonl", "--predictions",
                        "$ROOT/pw/results.jsonl", "--metric", "j"],
    "pairwise-verdicts": ["meta-eval", "run", "aurora", "--data", "$ROOT/pw/pairs.jsonl", "--verdicts",
                          "$ROOT/pw/verdicts.jsonl"],
    "editscore-bench": ["meta-eval", "run", "editscore-bench", "--data", "$ROOT/rb/editscore-bench-prep", "--predictions",
                        "$ROOT/rb/editscore-bench-results.jsonl", "--metric", "m"],
    "editscore-bench-published": ["meta-eval", "run", "editscore-bench", "--data", "$ROOT/rb/es", "--predictions",
                                  "$ROOT/rb/editscore-bench-results.jsonl", "--metric", "m"],
    "editreward-bench": ["meta-eval", "run", "editreward-bench", "--data", "$ROOT/rb/editreward-bench-prep",
                         "--predictions", "$ROOT/rb/editreward-bench-results.jsonl", "--metric", "m"],
    "mmrb2-scores": ["meta-eval", "run", "mmrb2", "--data", "$ROOT/rb/mmrb2-prep", "--predictions",
                     "$ROOT/rb/mmrb2-results.jsonl", "--metric", "m"],
    "mmrb2-verdicts": ["meta-eval", "run", "mmrb2", "--data", "$ROOT/rb/mmrb2-prep", "--verdicts",
                       "$ROOT/rb/mmrb2-verdicts.jsonl"],
    "prepare-mmrb2": ["meta-eval", "prepare", "mmrb2", "$ROOT/rb/mm/edit.json", "--out", "$ROOT/out/p",
                      "--option", "multi_input=first"],
    "calibrate-imagenhub": ["calibrate", "run", "imagenhub", "--data", "$ROOT/ih/ratings", "--predictions",
                            "$ROOT/ih/preds.jsonl", "--metric", "score", "--out", "$ROOT/out/cal.json", "--folds", "3"],
    "calibrate-pointwise": ["calibrate", "run", "aurora", "--data", "$ROOT/pw/human.jsonl", "--predictions",
                            "$ROOT/pw/results.jsonl", "--metric", "j,k", "--out", "$ROOT/out/cal.json", "--method", "platt"],
    "calibrate-pointwise-good-at": ["calibrate", "run", "aurora", "--data", "$ROOT/pw/human.jsonl", "--predictions",
                                    "$ROOT/pw/results.jsonl", "--metric", "j", "--good-at", "0.5", "--out",
                                    "$ROOT/out/cal.json"],
    "shared-imagenhub-judge": ["meta-eval", "run", "imagenhub", "--data", f"{IH}/human_ratings", "--predictions",
                               f"{IH}/judge_outputs/gpt4o_0shot", "--n-boot", "20"],
    "shared-calibrate-imagenhub": ["calibrate", "run", "imagenhub", "--data", f"{IH}/human_ratings", "--predictions",
                                   f"{IH}/judge_outputs/gpt4o_0shot", "--out", "$ROOT/out/cal.json"],
    "calibrate-pairwise": ["calibrate", "run", "aurora", "--data", "$ROOT/pw/pairs.jsonl", "--predictions",
                           "$ROOT/pw/results.jsonl", "--metric", "j", "--out", "$ROOT/out/cal.json", "--folds", "3"],
}


def _fresh_out(root: Path) -> Path:
    import shutil

    out = root / "out"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    return out


@pytest.mark.parametrize("name", sorted(RUN_CASES))
def test_meta_eval_run_gives_the_old_commands_output(name: str, fixtures: Path) -> None:
    """`meta-eval run NAME` (and `calibrate run NAME`, `prepare --option`) is the old per-benchmark
    command: the same JSON, report page and files, compared with the old command's golden."""
    if name.startswith("shared-"):
        shared_path("benchmarks", "imagenhub_tie")
    out = _fresh_out(fixtures)
    got, html = run_case(RUN_CASES[name], fixtures, out, not name.startswith(NO_REPORT))
    assert got == (GOLDEN / f"{name}.json").read_text(encoding="utf-8")
    if html is not None:
        assert sha(html) == (GOLDEN / f"{name}.report.sha256").read_text(encoding="utf-8")
    for f in CASES[name][1]:
        assert _norm((out / f).read_text(encoding="utf-8"), fixtures) == \
            (GOLDEN / f"{name}.{Path(f).name}.json").read_text(encoding="utf-8")


def test_old_commands_are_hidden_and_print_what_run_prints(fixtures: Path) -> None:
    """The old commands are hidden (one release) and their text output is `meta-eval run`'s."""
    res = CliRunner().invoke(app, ["meta-eval", "--help"])
    assert res.exit_code == 0
    shown = res.stdout
    for old in ("imagenhub", "genai-bench", "pointwise", "pairwise", "editscore-bench", "editreward-bench", "mmrb2"):
        assert f" {old} " not in shown
    for new in (" run ", " list ", " prepare ", " arena "):
        assert new in shown
    old_text = CliRunner().invoke(app, ["meta-eval", "editreward-bench", "--bench", f"{fixtures}/rb/editreward-bench-prep",
                                        "--predictions", f"{fixtures}/rb/editreward-bench-results.jsonl", "--metric", "m"])
    new_text = CliRunner().invoke(app, ["meta-eval", "run", "editreward-bench", "--data",
                                        f"{fixtures}/rb/editreward-bench-prep", "--predictions",
                                        f"{fixtures}/rb/editreward-bench-results.jsonl", "--metric", "m"])
    assert old_text.exit_code == new_text.exit_code == 0
    assert old_text.stdout == new_text.stdout and old_text.stdout.startswith("EditReward-Bench (TIGER-Lab): strict group")


def test_meta_eval_list_names_every_human_label_benchmark_from_the_specs() -> None:
    import json

    res = CliRunner().invoke(app, ["meta-eval", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert {"aurora", "imagenhub", "genai-bench", "editscore-bench", "editreward-bench", "mmrb2"} <= set(rows)
    assert rows["editreward-bench"]["label_kind"] == "ranked" and "editreward" in rows["editreward-bench"]["protocols"]
    assert rows["aurora"]["protocols"]["official"].startswith("ImagenHub") and rows["mmrb2"]["prepare"]
    assert not rows["imagenhub"]["prepare"] and rows["imagenhub"]["calibration_target"].startswith("the share of")
    assert rows["mmrb2"]["calibration_target"] is None
    assert "gedit" not in rows  # an editor benchmark is no human-label one


def test_run_refuses_an_unknown_protocol_and_an_editor_benchmark(fixtures: Path) -> None:
    res = CliRunner().invoke(app, ["meta-eval", "run", "genai-bench", "--data", f"{fixtures}/genai/genai.json",
                                   "--protocol", "nope"])
    assert res.exit_code == 2 and "no protocol 'nope'; it has genai-bench, adiee-genai-4way" in res.output
    res = CliRunner().invoke(app, ["meta-eval", "run", "gedit", "--data", f"{fixtures}/genai/genai.json"])
    assert res.exit_code == 2 and "gedit is not a human-label benchmark" in res.output
    res = CliRunner().invoke(app, ["meta-eval", "run", "mmrb2", "--data", f"{fixtures}/rb/mmrb2-prep", "--predictions",
                                   f"{fixtures}/rb/mmrb2-results.jsonl", "--option", "colour=red"])
    assert res.exit_code == 2 and "benchmark mmrb2 takes no option colour" in res.output


@pytest.mark.parametrize("name", sorted(n for n in CASES if not n.startswith("shared-") and n != "arena"))
def test_meta_eval_text_output_is_unchanged(name: str, fixtures: Path) -> None:
    """What the commands print without --json, as the code before the move printed it (the
    prepare commands' last words now name `meta-eval run`, where they named `meta-eval pairwise`)."""
    out = _fresh_out(fixtures)
    args = [a.replace("$ROOT/out", str(out)).replace("$ROOT", str(fixtures)) for a in CASES[name][0]]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    compare(name, _norm(res.stdout, fixtures), ".txt")


def test_python_run_returns_the_report_the_cli_prints(fixtures: Path) -> None:
    """`editlens.bench.evaluate.run` is the command: its MetaReport's document is the golden JSON."""
    import json

    from editlens.bench.evaluate import MetaReport, run

    res = run("editreward-bench", fixtures / "rb" / "editreward-bench-prep",
              fixtures / "rb" / "editreward-bench-results.jsonl", metric="m")
    assert isinstance(res, MetaReport) and res.title == "TIGER-Lab EditReward-Bench" and res.extra is None
    text = json.dumps(res.report, indent=2, default=str, allow_nan=False) + "\n"
    assert _norm(text, fixtures) == (GOLDEN / "editreward-bench.json").read_text(encoding="utf-8")
    pw = run("aurora", fixtures / "pw" / "pairs.jsonl", fixtures / "pw" / "results.jsonl", metric="j")
    assert pw.title == "pair-wise" and pw.extra is not None and pw.extra["confusion"]["labels"][1] == "tie"
    assert sum(map(sum, pw.extra["confusion"]["matrix"])) == pw.report["n"]


@pytest.mark.parametrize("argv, message", [
    (["genai-bench", "--data", "$ROOT/genai/genai.json", "--predictions", "$ROOT/pw/results.jsonl"],
     "scores (--predictions) go with --protocol adiee-genai-4way"),
    (["aurora", "--data", "$ROOT/pw/pairs.jsonl", "--predictions", "$ROOT/pw/results.jsonl", "--protocol", "aurora"],
     "pair-wise labels; protocol aurora reads point-wise ones"),
    (["aurora", "--data", "$ROOT/pw/pairs.jsonl", "--predictions", "$ROOT/pw/results.jsonl", "--verdicts",
      "$ROOT/pw/verdicts.jsonl"], "give exactly one of --predictions (scores) or --verdicts"),
    (["imagenhub", "--data", "$ROOT/nowhere", "--predictions", "$ROOT/ih/preds.jsonl"],
     "nowhere: no rater TSV files"),
    (["mmrb2", "--data", "$ROOT/rb/mmrb2-prep", "--predictions", "$ROOT/rb/mmrb2-results.jsonl", "--metric", "zzz"],
     "no result for metric 'zzz'"),
    (["nope", "--data", "$ROOT/genai/genai.json"], "unknown benchmark 'nope'; meta-eval runs aurora, "),
])
def test_run_says_what_is_wrong_and_exits_2(argv: list[str], message: str, fixtures: Path) -> None:
    res = CliRunner().invoke(app, ["meta-eval", "run", *[a.replace("$ROOT", str(fixtures)) for a in argv]])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
