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
    args = [a.replace("$ROOT", str(root)).replace("$SHARED", str(SHARED)).replace("$ROOT/out", str(out)) for a in argv]
    args = [a.replace(str(root / "out"), str(out)) for a in args]
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
    out = fixtures / "out"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    out.mkdir()
    got, html = run_case(argv, fixtures, out, not name.startswith(NO_REPORT))
    compare(name, got)
    if html is not None:
        compare(name, sha(html), ".report.sha256")
    for f in files:
        compare(f"{name}.{Path(f).name}", _norm((out / f).read_text(encoding="utf-8"), fixtures))
