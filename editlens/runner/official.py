"""A benchmark run in its owners' own files, and the owners' own code run on them.

* :func:`export_official` (``editlens bench export RUN --official DIR``) writes a
  ``bench run``'s judge answers as each owner's scripts write and read them, so
  that a user can run those scripts or submit to the owners' leaderboards:

  ======================  =====================================================================
  GEdit-Bench             ``DIR/<model>/gpt4o/eval_results_new/<model>_<task>_gpt_score.csv``
                          (the columns ``test_gedit_score.py`` writes and
                          ``calculate_statistics.py`` reads), one file per task type
  ImgEdit-Bench (basic)   ``DIR/<model>/result.json`` ``{key: answer}`` (``basic_bench.py``'s
                          output, read by ``step1_get_avgscore.py``) and ``DIR/basic_edit.json``
                          (the cases, for ``step2_typescore.py --basic_edit``)
  ImgEdit-Bench (UGE)     ``DIR/<model>/result.json`` (read by ``UGE/get_average_score.py``)
  KRIS-Bench              ``DIR/<model>/<category>/metrics.json`` (what each ``metrics_*.py``
                          script writes per category)
  RISEBench               ``DIR/<model>/<model>.pkl`` ``{index: {judge1, judge2, judge3}}`` (the
                          judge-output file ``gpt_eval.py`` keeps; with every case in it, its
                          ``main`` asks nothing and runs only its scoring tail) and
                          ``DIR/<model>/data_total.json`` (the cases judged, rows as published)
  MagicBrush              ``DIR/<model>/<img_id>/<img_id>_1.png``, ``..._inde_N`` (single-turn)
                          or ``..._iter_N`` (multi-turn): the edit files, and
                          ``DIR/gt/<img_id>/<img_id>-outputN.png`` (``evaluation/image_eval.py``)
  Emu Edit                ``DIR/<model>/<idx>/<idx>_1.png`` and the source as
                          ``DIR/gt/<idx>/<idx>-output1.png`` (the same script's L1)
  ======================  =====================================================================

* :func:`verify` (``editlens bench verify RUN --clone DIR``) runs the owners'
  code from the user's clone, in a subprocess, on those answers, and sets each
  figure editlens printed beside the owners' value: EQUAL or DIFFERENT, with the
  reason (an answer the release reads and editlens does not, one it would replace
  by a random number, a NaN the release prints for an empty task...). A clone
  whose scoring files are not the ones editlens was proved against (sha256 in
  ``official_scripts.json``) is refused, naming the file and the commit expected.
  Nothing of the owners' code is in editlens: the scripts run from the clone,
  as is where they can (ImgEdit, RISEBench), or imported and called there
  (:mod:`editlens.bench.official_driver` says which function, per benchmark).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

from editlens.core.io import atomic_write, read_json, read_jsonl
from editlens.core.safepath import inside
from editlens.errors import InputError

#: two figures are EQUAL when they differ by no more than this (float noise of two summation orders)
TOLERANCE = 1e-6


# ------------------------------------------------------------------------------------------------ the run


@dataclass
class RunAnswers:
    """A ``bench run`` folder as export and verify read it."""

    root: Path
    benchmark: str
    table: dict[str, Any]
    rows: list[dict[str, Any]]  # items.jsonl
    raw: dict[str, dict[str, str | None]]  # sample id -> question name -> the judge's answer
    data: Path | None  # the benchmark's files as given to bench run

    def models(self) -> list[str]:
        return list(self.table.get("models") or {})

    def answered(self) -> list[dict[str, Any]]:
        """Rows with judge answers (scored or unscored); failed and skipped ones have none."""
        return [r for r in self.rows if r["id"] in self.raw]


def load_run(run: str | Path) -> RunAnswers:
    """The table, the item rows and every stored judge answer of a ``bench run`` output folder."""
    root = Path(run)
    tfile, ifile, store_dir = root / "table.json", root / "items.jsonl", root / "run"
    for f in (tfile, ifile, store_dir):
        if not f.exists():
            raise InputError(f"{root}: not a `editlens bench run` output folder ({f.name} is missing); give the "
                             "folder passed to `bench run --out`")
    try:
        table = read_json(tfile, "the bench run's table")
        rows = read_jsonl(ifile)
    except InputError as e:
        raise InputError(f"{root}: table.json or items.jsonl is not readable JSON ({e}); rerun `editlens bench run` "
                         "to write them again") from None
    if not isinstance(table, dict) or not isinstance(table.get("benchmark"), str):
        raise InputError(f"{tfile}: no 'benchmark' in it; is it a `bench run` table?")
    from editlens.runner.store import ResultsStore

    store = ResultsStore(store_dir)
    try:
        name = f"bench_{table['benchmark'].replace('-', '_')}"
        current = {k: v for k, v in store.current_configs().items() if k == name}
        stored = store.rows(current) if current else []
        manifest = store.get_meta("manifest") or {}
    finally:
        store.close()
    raw: dict[str, dict[str, str | None]] = {}
    for r in stored:
        answers = (r.get("details") or {}).get("raw")
        if r["status"] in ("scored", "unscored") and isinstance(answers, dict):
            raw[r["sample_id"]] = {k: (v if isinstance(v, str) else None) for k, v in answers.items()}
    data = (manifest.get("inputs") or {}).get("data")
    if data and Path(data).exists():  # the instructions, which the owners' files carry beside the scores
        from editlens.runner.bench import read_benchmark

        try:
            by_item = {it.id: it.instruction for it in read_benchmark(table["benchmark"], data)[1]}
        except InputError:  # the files changed since the run: the instruction columns stay empty
            by_item = {}
        for r in rows:
            r.setdefault("instruction", by_item.get(r["item"], ""))
    return RunAnswers(root, table["benchmark"], table, rows, raw, Path(data) if data else None)


# ------------------------------------------------------------------------------------------------ formats


@dataclass
class Figure:
    """One printed figure of the run beside the owners' value for it."""

    model: str
    section: str
    row: str
    figure: str
    ours: float | None
    owner: float | None
    reason: str = ""

    @property
    def verdict(self) -> str:
        if self.ours is None and self.owner is None:
            return "EQUAL"
        if self.ours is None or self.owner is None:
            return "DIFFERENT"
        return "EQUAL" if abs(self.ours - self.owner) <= TOLERANCE else "DIFFERENT"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "section": self.section, "row": self.row, "figure": self.figure,
                "editlens": self.ours, "owner": self.owner, "verdict": self.verdict, "reason": self.reason}


@dataclass
class ItemRead:
    """How editlens and the owners' code read one item's answers (for the reasons)."""

    id: str
    model: str
    category: str
    ours: Any
    owner: Any
    why: str = ""  # what the owners' code did with an answer it did not read
    scope: dict[str, Any] = field(default_factory=dict)  # e.g. language, intersection


class OfficialFormat:
    """One benchmark's owner files (:meth:`export`) and owner code (:meth:`owner_figures`)."""

    name: ClassVar[str]
    #: what a user runs on the exported files (shown by export)
    how_to_run: ClassVar[str]
    #: False for a benchmark scored without a judge (its export copies images, not answers)
    judged: ClassVar[bool] = True

    def export(self, run: RunAnswers, out: Path) -> list[Path]:
        raise NotImplementedError

    def compare(self, run: RunAnswers, exported: Path, clone: Path, files: dict[str, Path],
                version: dict[str, Any], python: str, work: Path) -> tuple[list[Figure], list[str]]:
        raise NotImplementedError


FORMATS: dict[str, OfficialFormat] = {}


def official(cls: type[OfficialFormat]) -> type[OfficialFormat]:
    FORMATS[cls.name] = cls()
    return cls


def format_of(benchmark: str) -> OfficialFormat:
    if benchmark not in FORMATS:
        raise InputError(f"benchmark {benchmark!r}: no owners' files to export or verify (editlens has them for "
                         f"{', '.join(sorted(FORMATS))})")
    return FORMATS[benchmark]


# ------------------------------------------------------------------------------------------------ helpers


def _key(row: Mapping[str, Any]) -> str:
    """The case's key (names its output file) from its item id ``[category/[language/]]key``."""
    return str(row["item"]).rsplit("/", 1)[-1]


def _put(text: str, fh: Any) -> None:
    fh.write(text)


def _write_json(path: Path, obj: Any) -> Path:
    return atomic_write(path, lambda fh: json.dump(obj, fh, indent=2, ensure_ascii=False))


def _cell(table: Mapping[str, Any], model: str, section: str, row: str, figure: str) -> float | None:
    for sec in table["models"].get(model, {}).get("sections", []):
        if sec["name"] != section:
            continue
        for r in sec["rows"] + [sec["overall"]]:
            if r["row"] == row:
                v = (r["cells"].get(figure) or {}).get("value")
                return None if v is None else float(v)
    return None


def _finite(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


#: the pip requirement that provides a module the owners' code imports, where the names differ
PIP_NAMES = {"clip": "git+https://github.com/openai/CLIP.git (or the PyPI package openai-clip)",
             "cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn"}


def run_driver(task: str, request: Mapping[str, Any], python: str, work: Path, cwd: Path | None = None) -> Any:
    """:mod:`editlens.bench.official_driver` ``task`` in a subprocess of ``python``."""
    from editlens.bench import official_driver

    req, res = work / f"{task}.request.json", work / f"{task}.result.json"
    req.write_text(json.dumps(request, default=str), encoding="utf-8")
    run_script([python, official_driver.__file__, task, str(req), str(res)], cwd or work, f"the {task} step")
    return read_json(res, f"the {task} step's result")


def run_script(cmd: Sequence[str], cwd: Path, what: str) -> str:
    """Run an owner's script (or the driver) and return its stdout; a failure is an error naming the
    command and the script's last lines (e.g. a module its environment lacks)."""
    p = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-6:])
        hint = ""
        missing = re.search(r"editlens-missing-module: (\S+)|No module named '([^']+)'", tail)
        if missing:
            mod = (missing.group(1) or missing.group(2)).split(".")[0]
            hint = (f" (the owners' code imports the module {mod!r}, which {cmd[0]} lacks: install it with "
                    f"`{cmd[0]} -m pip install {PIP_NAMES.get(mod, mod)}`, or give --owner-python the interpreter "
                    "of the owners' environment)")
        raise InputError(f"{what} failed: {' '.join(cmd)} exited {p.returncode}{hint}:\n{tail}")
    return p.stdout


def _differences(items: Sequence[ItemRead], keep: Callable[[ItemRead], bool], fmt: Callable[[Any], str] = str,
                 limit: int = 3) -> str:
    """The reason text for one figure: the items in its scope the two sides read differently."""
    mine = [i for i in items if keep(i) and i.ours != i.owner]
    if not mine:
        return ""
    only_ours = [i for i in mine if i.owner is None and i.ours is not None]
    only_owner = [i for i in mine if i.ours is None and i.owner is not None]
    both = [i for i in mine if i.ours is not None and i.owner is not None]
    parts = []
    fallback = [i for i in mine if "random" in i.why]
    if only_ours:
        parts.append(f"{len(only_ours)} item(s) read by editlens, not by the release ("
                     + "; ".join(f"{i.id}: {i.why}" if i.why else i.id for i in only_ours[:limit])
                     + (" ..." if len(only_ours) > limit else "") + ")")
    if only_owner:
        parts.append(f"{len(only_owner)} item(s) read by the release, unscored by editlens ("
                     + ", ".join(f"{i.id} = {fmt(i.owner)}" for i in only_owner[:limit])
                     + (" ..." if len(only_owner) > limit else "") + ")")
    if both:
        parts.append(f"{len(both)} item(s) read differently ("
                     + ", ".join(f"{i.id}: editlens {fmt(i.ours)}, release {fmt(i.owner)}" for i in both[:limit])
                     + (" ..." if len(both) > limit else "") + ")")
    unread = [i for i in items if keep(i) and i.ours is None and i.owner is None and "random" in i.why]
    if fallback or unread:
        n = len({i.id for i in fallback + unread})
        parts.append(f"{n} answer(s) the release would replace by a random number (random.randint on a failed "
                     "parse): left out on both sides")
    return "; ".join(parts)


def _unread(items: Sequence[ItemRead], keep: Callable[[ItemRead], bool], limit: int = 3) -> str:
    """Items neither side read, where the release still counts them (e.g. as incomplete)."""
    both = [i for i in items if keep(i) and i.ours is None and i.owner is None and i.why and "random" not in i.why]
    if not both:
        return ""
    return (f"{len(both)} item(s) unreadable to both ({', '.join(i.id for i in both[:limit])}"
            f"{' ...' if len(both) > limit else ''}): {both[0].why}")


def _both_unread_note(items: Sequence[ItemRead], keep: Callable[[ItemRead], bool]) -> str:
    unread = [i for i in items if keep(i) and i.ours is None and i.owner is None and "random" in i.why]
    if not unread:
        return ""
    return (f"{len(unread)} answer(s) the release would replace by random.randint(0, 10) after a retry "
            "(irreproducible): unscored in editlens, left out here")


# ------------------------------------------------------------------------------------------------ GEdit-Bench


@official
class GEditOfficial(OfficialFormat):
    name = "gedit"
    how_to_run = ("cd Step1X-Edit/GEdit-Bench && python calculate_statistics.py --model_name MODEL --save_path DIR "
                  "--backbone gpt4o --language en (the release accepts en|zh; CN rows are tagged cn as in the data)")
    COLUMNS = ("source_image", "edited_image", "instruction", "sementics_score", "quality_score",
               "intersection_exist", "instruction_language")

    def _csv_row(self, r: Mapping[str, Any], model: str, out: Path) -> dict[str, Any]:
        base = f"{out}/{model}/fullset/{r['category']}/{r['language']}/{_key(r)}"
        return {"source_image": f"{base}_SRCIMG.png", "edited_image": f"{base}.png",
                "instruction": r.get("instruction", ""), "intersection_exist": bool(r.get("intersection")),
                "instruction_language": r["language"]}

    def export(self, run: RunAnswers, out: Path) -> list[Path]:
        from editlens.bench.gedit import TASKS

        written = []
        for model in run.models():
            by_task: dict[str, list[dict[str, Any]]] = {t: [] for t in TASKS}
            for r in run.rows:
                if r["model"] != model or r["status"] != "scored":
                    continue  # the release writes a row only for an item it scored
                s = r["scores"]
                by_task.setdefault(r["category"], []).append(
                    {**self._csv_row(r, model, out), "sementics_score": s["SC"], "quality_score": s["PQ"]})
            folder = out / model / "gpt4o" / "eval_results_new"
            for task, rows in by_task.items():
                buf = io.StringIO()
                w = csv.DictWriter(buf, fieldnames=list(self.COLUMNS))
                w.writeheader()
                w.writerows(rows)
                written.append(atomic_write(folder / f"{model}_{task}_gpt_score.csv", partial(_put, buf.getvalue())))
        return written

    def compare(self, run: RunAnswers, exported: Path, clone: Path, files: dict[str, Path],
                version: dict[str, Any], python: str, work: Path) -> tuple[list[Figure], list[str]]:
        from editlens.bench.gedit import TASKS

        answered = run.answered()
        request = {"files": {"utils": str(files["utils"]), "statistics": str(files["statistics"])},
                   "workdir": str(work / "gedit"), "models": run.models(),
                   "languages": sorted({r["language"] for r in run.rows}),
                   "items": [{**self._csv_row(r, r["model"], exported), "id": r["id"], "model": r["model"],
                              "task": r["category"], "language": r["language"],
                              "intersection": bool(r.get("intersection")),
                              "answers": run.raw[r["id"]]} for r in answered]}
        res = run_driver("gedit", request, python, work)
        reads = []
        for r in answered:
            o = res["items"].get(r["id"], {})
            ours = (r["scores"]["SC"], r["scores"]["PQ"]) if r["status"] == "scored" else None
            owner = (o["SC"], o["PQ"]) if "SC" in o and "PQ" in o else None
            reads.append(ItemRead(r["id"], r["model"], r["category"], ours, owner, o.get("why", ""),
                                  {"language": r["language"], "intersection": bool(r.get("intersection"))}))
        figs = []
        for model, langs in res["figures"].items():
            for lang, subsets in langs.items():
                for subset, rows in subsets.items():
                    section = f"{lang.upper()} {subset}"
                    for label, values in rows.items():
                        task = None if label == "average" else label
                        ours_row = "overall" if label == "average" else label
                        keep = _gedit_scope(model, lang, subset, task)
                        reason = _differences(reads, keep, lambda v: f"SC {v[0]:g}, PQ {v[1]:g}")
                        if label == "average" and any(v is None for v in values):
                            empty = [t for t in TASKS if rows[t][0] is None]
                            if empty:
                                reason = "; ".join(x for x in (reason, (
                                    f"the release's average is NaN: np.mean over all 11 task types, and "
                                    f"{', '.join(empty)} {'has' if len(empty) == 1 else 'have'} no rows in this "
                                    "section (editlens averages the task types with rows and names the others)")) if x)
                        note = _both_unread_note(reads, keep)
                        for fig, v in zip(("SC", "PQ", "O"), values):
                            f = Figure(model, section, label, fig, _cell(run.table, model, section, ours_row, fig), v)
                            f.reason = reason if f.verdict == "DIFFERENT" else note
                            figs.append(f)
        return figs, list(res.get("notes") or [])


def _gedit_scope(model: str, lang: str, subset: str, task: str | None) -> Callable[[ItemRead], bool]:
    """The items one GEdit-Bench figure is computed from."""
    def keep(i: ItemRead) -> bool:
        return (i.model == model and i.scope["language"] == lang and (subset == "fullset" or i.scope["intersection"])
                and (task is None or i.category == task))
    return keep


# ------------------------------------------------------------------------------------------------ ImgEdit


@official
class ImgEditOfficial(OfficialFormat):
    name = "imgedit"
    how_to_run = ("cd ImgEdit/Benchmark/Basic && python step1_get_avgscore.py --result_json DIR/MODEL/result.json "
                  "--average_score_json DIR/MODEL/average_score.json && python step2_typescore.py "
                  "--average_score_json DIR/MODEL/average_score.json --basic_edit DIR/basic_edit.json "
                  "--typescore_json DIR/MODEL/typescore.json")
    section = "single-turn"

    def _answers(self, run: RunAnswers, model: str) -> dict[str, str]:
        return {_key(r): run.raw[r["id"]].get("judge") or "" for r in run.answered() if r["model"] == model}

    def export(self, run: RunAnswers, out: Path) -> list[Path]:
        written = [_write_json(out / model / "result.json", self._answers(run, model)) for model in run.models()]
        cases: dict[str, Any] = {}
        for r in run.rows:
            cases.setdefault(_key(r), {"id": r.get("source_id"), "prompt": r.get("instruction"),
                                       "edit_type": r["category"]})
        written.append(_write_json(out / "basic_edit.json", cases))
        return written

    def _reads(self, run: RunAnswers, model: str, owner: Mapping[str, Any]) -> list[ItemRead]:
        out = []
        for r in run.answered():
            if r["model"] != model:
                continue
            ours = r["scores"].get("score") if r["status"] == "scored" else None
            o = owner.get(_key(r))
            out.append(ItemRead(r["id"], model, r["category"], ours, o,
                                "" if o is not None else "no 'Name: N' line the release's split(': ') reads"))
        return out

    def compare(self, run: RunAnswers, exported: Path, clone: Path, files: dict[str, Path],
                version: dict[str, Any], python: str, work: Path) -> tuple[list[Figure], list[str]]:
        figs = []
        for model in run.models():
            res, avg, types = exported / model / "result.json", work / f"{model}.average_score.json", \
                work / f"{model}.typescore.json"
            run_script([python, str(files["step1"]), "--result_json", str(res), "--average_score_json", str(avg)],
                       work, "step1_get_avgscore.py")
            run_script([python, str(files["step2"]), "--average_score_json", str(avg), "--basic_edit",
                        str(exported / "basic_edit.json"), "--typescore_json", str(types)], work,
                       "step2_typescore.py")
            per_item = read_json(avg, "step1_get_avgscore.py's output")
            by_type = read_json(types, "step2_typescore.py's output")
            reads = self._reads(run, model, per_item)
            from editlens.bench.imgedit import TYPES

            for t in TYPES:
                f = Figure(model, self.section, t, "score", _cell(run.table, model, self.section, t, "score"),
                           _finite(by_type.get(t)))
                f.reason = _differences(reads, lambda i: i.category == t) if f.verdict == "DIFFERENT" else ""  # noqa: B023
                figs.append(f)
            vals = [float(v) for v in by_type.values()]
            f = Figure(model, self.section, "overall", "score",
                       _cell(run.table, model, self.section, "overall", "score"),
                       round(sum(vals) / len(vals), 2) if vals else None)
            if f.verdict == "DIFFERENT":
                f.reason = _differences(reads, lambda i: True) or (
                    "the same per-type scores: the release prints no overall; its paper's Overall is the mean of "
                    "the type scores it prints, to 2 decimals; editlens' differs from that")
            figs.append(f)
        return figs, ["ImgEdit overall: the release's scripts print per-type scores only; the owner's overall here "
                      "is the mean of the per-type scores step2_typescore.py printed, to 2 decimals as the paper's "
                      "Overall column prints it"]


@official
class UGEOfficial(ImgEditOfficial):
    name = "imgedit-uge"
    how_to_run = "cd ImgEdit/Benchmark/UGE && python get_average_score.py --result_json DIR/MODEL/result.json"
    section = "UGE"

    def export(self, run: RunAnswers, out: Path) -> list[Path]:
        return [_write_json(out / model / "result.json", self._answers(run, model)) for model in run.models()]

    def compare(self, run: RunAnswers, exported: Path, clone: Path, files: dict[str, Path],
                version: dict[str, Any], python: str, work: Path) -> tuple[list[Figure], list[str]]:
        figs = []
        for model in run.models():
            res = exported / model / "result.json"
            printed = run_script([python, str(files["script"]), "--result_json", str(res)], work,
                                 "get_average_score.py").strip().splitlines()
            owner = _finite(printed[-1]) if printed else None
            per_item = run_driver("lines_average", {"files": {"script": str(files["script"])},
                                                    "answers": read_json(res, "the judge's answers")},
                                  python, work)["items"]
            reads = self._reads(run, model, per_item)
            f = Figure(model, self.section, "overall", "score",
                       _cell(run.table, model, self.section, "overall", "score"), owner)
            if f.verdict == "DIFFERENT":
                f.reason = _differences(reads, lambda i: True) or (
                    "the same per-edit scores: the release prints round(mean, 2)")
            figs.append(f)
        return figs, []


# ------------------------------------------------------------------------------------------------ KRIS-Bench

#: per judging script: question -> the script's extractor for its answer
_KRIS_CALLS: dict[str, dict[str, Any]] = {
    "common": {"VC": "extract_consistency_score_and_reason", "IF": "extract_instruction_score_and_reason",
               "VQ": "extract_quality_score_and_reason"},
    "knowledge": {"VC": "extract_consistency_score", "IF_KP": "extract_dual_scores", "VQ": "extract_quality_score"},
    # metrics_view_change.py calls metrics_common's three extractors (imported into its namespace)
    "view": {"VC": "extract_consistency_score_and_reason", "IF": "extract_instruction_score_and_reason",
             "VQ": "extract_quality_score_and_reason"},
    # metrics_multi_element.py and metrics_temporal_prediction.py call metrics_common's generic
    # extract_score_and_reason with the key of each question
    **{script: {q: ["extract_score_and_reason", {"score_key": f"{name}_score",
                                                 "reason_fields": [f"{name}_reasoning"] if script == "multi"
                                                 else ["reasoning", "reason"]}]
                for q, name in (("VC", "consistency"), ("IF", "instruction"), ("VQ", "quality"))}
       for script in ("multi", "temporal")},
}
_KRIS_KEYS = {"VC": "consistency", "IF": "instruction", "VQ": "quality", "KP": "knowledge"}


def _kris_scope(category: str | None, figure: str) -> Callable[[ItemRead], bool]:
    """The per-dimension reads one KRIS-Bench figure is computed from."""
    def keep(i: ItemRead) -> bool:
        return (category is None or i.category == category) and (figure == "overall" or i.id.endswith(" " + figure))
    return keep


@official
class KrisOfficial(OfficialFormat):
    name = "kris"
    how_to_run = ("the release has no summary script (its issue #1): DIR/MODEL/CATEGORY/metrics.json is what its "
                  "metrics_*.py scripts write (results/MODEL/CATEGORY/metrics.json); a rerun of them skips every "
                  "image whose scores are all there")

    @staticmethod
    def _dims(r: Mapping[str, Any]) -> dict[str, float]:
        """The 1-5 dimensions editlens read for a row (its table holds them scaled to 0-100)."""
        from editlens.bench.kris import DIMS

        return {d: float(r["scores"][d]) / 25.0 + 1.0 for d in DIMS
                if isinstance(r.get("scores", {}).get(d), (int, float))}

    def export(self, run: RunAnswers, out: Path) -> list[Path]:
        from editlens.bench.kris import WITH_KNOWLEDGE

        written = []
        for model in run.models():
            by_cat: dict[str, dict[str, Any]] = {}
            for r in run.answered():
                if r["model"] != model:
                    continue
                dims = self._dims(r)
                rec: dict[str, Any] = {"instruction": "", "explain": r.get("explain", "")}
                names = ("VC", "IF", "VQ") + (("KP",) if r["category"] in WITH_KNOWLEDGE else ())
                for d in names:  # the keys each script writes; an unreadable dimension is null, as there
                    v = dims.get(d)
                    rec[f"{_KRIS_KEYS[d]}_score"] = None if v is None else int(round(v))
                    rec[f"{_KRIS_KEYS[d]}_reasoning"] = None
                by_cat.setdefault(r["category"], {})[_key(r)] = rec
            for cat, recs in by_cat.items():
                written.append(_write_json(out / model / cat / "metrics.json", recs))
        return written

    def compare(self, run: RunAnswers, exported: Path, clone: Path, files: dict[str, Path],
                version: dict[str, Any], python: str, work: Path) -> tuple[list[Figure], list[str]]:
        from editlens.bench.kris import SCRIPT_OF, scale100

        prompts = next((p for p in (clone / "utils" / "prompts.py", clone / "prompts.py") if p.is_file()), None)
        items, skipped = [], set()
        for r in run.answered():
            script = SCRIPT_OF.get(r["category"])
            if script not in _KRIS_CALLS:
                skipped.add(r["category"])
                continue
            items.append({"id": r["id"], "script": script, "answers": run.raw[r["id"]], "calls": _KRIS_CALLS[script]})
        res = run_driver("kris", {"files": {"scripts": {k: str(files[k]) for k in _KRIS_CALLS},
                                            "prompts": str(prompts) if prompts else None}, "items": items},
                         python, work)["items"]
        notes = ["KRIS-Bench publishes no summary script: the owners' figures here are their scripts' extractors "
                 "on every answer, averaged as editlens and the community tooling do ((mean - 1) x 25 per "
                 "dimension over the items with it; an item's overall the mean of the dimensions read)"]
        if skipped:
            notes.append(f"not compared: {', '.join(sorted(skipped))} (judged by metrics_view_change.py, "
                         "metrics_multi_element.py or metrics_temporal_prediction.py, which editlens has not been "
                         "checked against); the pooled rows are compared over the other categories only")
        figs = []
        for model in run.models():
            reads: list[ItemRead] = []
            owner_dims: dict[str, dict[str, float]] = {}
            for r in run.answered():
                if r["model"] != model or r["id"] not in res:
                    continue
                got: dict[str, Any] = {}
                for q, v in res[r["id"]].items():
                    if isinstance(v, dict):
                        got.update({"IF": v.get("instruction_score"), "KP": v.get("knowledge_score")})
                    else:
                        got[q] = v
                dims = {d: float(v) for d, v in got.items() if isinstance(v, (int, float))}
                owner_dims[r["id"]] = dims
                ours = self._dims(r)
                for d in sorted(set(dims) | set(ours)):
                    reads.append(ItemRead(f"{r['id']} {d}", model, r["category"], ours.get(d), dims.get(d),
                                          "" if d in dims else "no score the release's extractors read"))
            rows = [r for r in run.answered() if r["model"] == model and r["id"] in owner_dims]
            for cat in sorted({r["category"] for r in rows}) + [None]:
                mine = [r for r in rows if cat is None or r["category"] == cat]
                if cat is None and skipped:
                    continue  # the table's pooled rows hold categories not compared
                label = cat or "overall"
                for fig in ("VC", "VQ", "IF", "KP", "overall"):
                    if fig == "overall":
                        vals = [sum(d.values()) / len(d) for d in (owner_dims[r["id"]] for r in mine) if d]
                    else:
                        vals = [owner_dims[r["id"]][fig] for r in mine if fig in owner_dims[r["id"]]]
                    owner = scale100(sum(vals) / len(vals)) if vals else None
                    f = Figure(model, "by category", label, fig, _cell(run.table, model, "by category", label, fig),
                               owner)
                    if f.verdict == "DIFFERENT":
                        f.reason = _differences(reads, _kris_scope(cat, fig))
                    figs.append(f)
        return figs, notes


# ------------------------------------------------------------------------------------------------ RISEBench

_RISE_QUESTIONS = {"judge1": "consistency", "judge2": "reasoning", "judge3": "plausibility"}
_RISE_ROWS = {"Overall": "overall", "Temporal": "temporal_reasoning", "Causal": "causal_reasoning",
              "Spatial": "spatial_reasoning", "Logical": "logical_reasoning"}
_RISE_DIMS = {"Reasoning": "R", "Consistency": "AC", "ApprConsistency": "AC", "Quality": "VP",
              "VisualPlausibility_total": "VP"}


@official
class RiseOfficial(OfficialFormat):
    name = "rise"
    how_to_run = ("cd RISEBench && python gpt_eval.py --data DIR/MODEL/data_total.json --output DIR/MODEL (the judge "
                  "answers are in DIR/MODEL/MODEL.pkl: nothing is asked, only the scores are computed; it writes "
                  "DIR/MODEL/MODEL_judge.csv and .xlsx)")

    def _cases(self, run: RunAnswers, model: str) -> list[dict[str, Any]]:
        """The rows of the run's data_total.json for the cases ``model`` has judge answers for."""
        from editlens.bench.published import find_file

        if run.data is None or not Path(run.data).exists():
            raise InputError(f"{run.root}: the benchmark's data ({run.data}) is not there any more; the release's "
                             "scoring needs its data_total.json rows (index, category, subtask, consistency_free)")
        f = find_file(Path(run.data), "data_total.json", "RISEBench's data file")
        rows = read_json(f, "RISEBench's data file")
        keep = {_key(r) for r in run.answered() if r["model"] == model}
        return [c for c in rows if str(c.get("index")) in keep]

    def export(self, run: RunAnswers, out: Path) -> list[Path]:
        written = []
        for model in run.models():
            cases = self._cases(run, model)
            if not cases:
                continue
            written.append(_write_json(out / model / "data_total.json", cases))
            index = {str(c["index"]): c["index"] for c in cases}
            judged: dict[Any, Any] = {}
            for r in run.answered():
                if r["model"] != model or _key(r) not in index:
                    continue
                a = run.raw[r["id"]]
                entry: dict[str, Any] = {"judge1": (a.get("consistency") or "") if "consistency" in a else None,
                                         "judge2": a.get("reasoning") or ""}
                if "plausibility" in a:
                    entry["judge3"] = a.get("plausibility") or ""
                judged[index[_key(r)]] = entry  # keyed by the data's own index value, as gpt_eval.py looks it up
            written.append(atomic_write(out / model / f"{model}.pkl", lambda fh: pickle.dump(judged, fh), mode="wb"))  # noqa: B023
        return written

    def compare(self, run: RunAnswers, exported: Path, clone: Path, files: dict[str, Path],
                version: dict[str, Any], python: str, work: Path) -> tuple[list[Figure], list[str]]:
        import shutil

        figs = []
        acc_fig = "accuracy"
        theirs = version.get("release")
        ours = run.table.get("release")  # bench run records the release it followed (a commit)
        ours = ours.get("commit") if isinstance(ours, dict) else ours
        notes = [f"RISEBench gpt_eval.py as of release {theirs}; the run follows release {ours}"]
        other = ""
        if theirs and ours and theirs != ours:
            other = (f"the run follows RISEBench release {ours} and the clone's gpt_eval.py is release {theirs}: "
                     f"rerun `bench run rise --release {theirs}` (stored answers are re-read, nothing is asked)")
            notes.append(other)
        for model in run.models():
            if not (exported / model / f"{model}.pkl").is_file():
                notes.append(f"{model}: no case has judge answers; nothing to compare")
                continue
            data = exported / model / "data_total.json"
            cases = read_json(data, "the exported cases")
            free_field = any("consistency_free" in c for c in cases)
            dropped = len([r for r in run.rows if r["model"] == model]) - len(cases)
            if dropped:
                notes.append(f"{model}: {dropped} case(s) without judge answers (no output, or a lost request) are "
                             "not in its exported data_total.json: the release's figures are over the other cases "
                             "(with the whole data file its gpt_eval.py would stop at the missing output)")
            folder = work / "rise" / model  # a copy: gpt_eval.py writes beside its judge file
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(exported / model / f"{model}.pkl", folder / f"{model}.pkl")
            run_script([python, str(files["gpt_eval"]), "--data", str(data), "--output",
                        str(folder), "--model", model], work, "gpt_eval.py")
            with open(folder / f"{model}_judge.csv", encoding="utf-8") as fh:
                table = {r["-"]: r for r in csv.DictReader(fh)}
            with open(exported / model / f"{model}.pkl", "rb") as fh:
                answers = pickle.load(fh)
            by_key = {str(k): k for k in answers}
            extracted = run_driver("rise_extract", {"files": {"gpt_eval": str(files["gpt_eval"])},
                                                    "answers": {str(k): v for k, v in answers.items()}},
                                   python, work, cwd=work)["items"]
            reads = []
            for r in run.answered():
                if r["model"] != model:
                    continue
                if _key(r) not in extracted:
                    continue
                got = extracted[_key(r)]
                owner = {_RISE_QUESTIONS[q]: (v[0] if v else None) for q, v in got.items() if q in _RISE_QUESTIONS
                         and answers[by_key[_key(r)]].get(q) is not None}
                ours_dims = {d: r["scores"].get(d) for d in ("R", "AC", "VP") if r["scores"].get(d) is not None}
                reads.append(ItemRead(r["id"], model, r["category"], ours_dims or None,
                                      self._owner_dims(r["category"], owner),
                                      "" if all(v is not None for v in owner.values()) else
                                      "an answer without a 'Final Score' the release's extract() reads: the case "
                                      "counts as incomplete (0) in its Accuracy and NaN in its Score"))
            for label, row in table.items():
                if label in _RISE_ROWS:
                    ours_row = _RISE_ROWS[label]
                    for col, fig in (("Score-Origin", "score"), ("Score-Percentage", "score_100"),
                                     ("Accuracy", acc_fig)):
                        figs.append(self._figure(run, model, ours_row, fig, row[col], reads, free_field, other))
                elif "_" in label:
                    head, dim = label.split("_", 1)
                    if head in _RISE_ROWS and dim in _RISE_DIMS:
                        figs.append(self._figure(run, model, _RISE_ROWS[head], _RISE_DIMS[dim],
                                                 row["Score-Origin"], reads, free_field, other))
        return figs, notes

    @staticmethod
    def _owner_dims(category: str, owner: Mapping[str, Any]) -> dict[str, float] | None:
        if any(v is None for v in owner.values()):
            return None
        logical = category == "logical_reasoning"
        out = {}
        for q, d in (("reasoning", "R"), ("consistency", "AC"), ("plausibility", "VP")):
            if q in owner:
                out[d] = float(4 * min(owner[q], 1) + 1) if logical else float(owner[q])
        return out

    @staticmethod
    def _figure(run: RunAnswers, model: str, row: str, fig: str, owner: Any, reads: Sequence[ItemRead],
                free_field: bool, other_release: str = "") -> Figure:
        f = Figure(model, "RISEBench", row, fig, _cell(run.table, model, "RISEBench", row, fig), _finite(owner))
        if f.verdict != "DIFFERENT":
            return f
        scope: Callable[[ItemRead], bool] = lambda i: row == "overall" or i.category == row  # noqa: E731
        parts = [other_release, _differences(reads, scope)]
        if fig in ("score", "score_100"):
            if free_field and row != "logical_reasoning":
                parts.append("the release's calculate_score tests `row['consistency_free']`, which is NaN (truthy) "
                             "for every case without the field once any case of the data file has it, so it scores "
                             "every temporal/causal/spatial case 0.2 VP + 0.8 R")
        else:  # accuracy: a case with an unreadable answer is incomplete (0) in the release
            parts.append(_unread(reads, scope))
        f.reason = "; ".join(p for p in parts if p) or "the same per-case scores: the release aggregates them otherwise"
        return f


# ------------------------------------------------------------------------------------------------ MagicBrush, Emu Edit


def _manifest(run: RunAnswers) -> dict[str, dict[str, Any]]:
    """The run's manifest rows by sample id (the source, edited and reference images of each item)."""
    from editlens.core.io import iter_jsonl

    f = run.root / "run" / "manifest.jsonl"
    return {r["id"]: r for _, r in iter_jsonl(f, "rerun `editlens bench run` to write it")}


def _image_bytes(run: RunAnswers, value: str, what: str) -> bytes:
    """The encoded bytes of an image the manifest names (a file, or a table cell ``FILE#row=N&column=C``),
    relative to the run's ``run/`` folder."""
    from editlens.core.embedded import parse_ref, read_table_image

    full = str(run.root / "run" / value) if not Path(value.split("#", 1)[0]).is_absolute() else value
    ref = parse_ref(full)
    try:
        return read_table_image(ref) if ref is not None else Path(full).read_bytes()
    except OSError as e:
        raise InputError(f"{run.root}: the {what} image {value} (named in run/manifest.jsonl) cannot be read "
                         f"({e}); the run's inputs moved since `bench run`") from None


def _owner_image(data: bytes, out_stem: Path) -> Path:
    """``data`` written at ``out_stem`` as the owners' script reads it (names holding ``.png`` or ``.jpg``):
    PNG and JPEG files byte for byte, any other format decoded (RGB, as the script converts it) into a PNG."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        fmt = im.format
        if fmt not in ("PNG", "JPEG"):
            buf = io.BytesIO()
            im.convert("RGB").save(buf, format="PNG")
            data, fmt = buf.getvalue(), "PNG"
    target = out_stem.with_name(out_stem.name + (".png" if fmt == "PNG" else ".jpg"))
    return atomic_write(target, partial(_put_bytes, data), mode="wb")


def _put_bytes(data: bytes, fh: Any) -> None:
    fh.write(data)


class _PixelOfficial(OfficialFormat):
    """A metric suite's model-free part (L1/L2) against MagicBrush's ``evaluation/image_eval.py``: the
    edits copied into its generated-image layout, its ground truth beside them, and its own pairing
    functions and ``eval_distance`` run on them (:func:`editlens.bench.official_driver.pixel_distance`)."""

    judged = False
    GT = "gt"
    #: section of editlens' table -> the owner's setting it is computed as
    SETTINGS: ClassVar[dict[str, str]] = {}
    FIGURES: ClassVar[dict[str, str]] = {"L1": "l1", "L2": "l2"}

    def _edit_name(self, row: Mapping[str, Any]) -> tuple[str, str]:
        """(session folder, file stem) of ``row``'s edit in the owners' generated-image layout."""
        raise NotImplementedError

    def _gt(self, run: RunAnswers, row: Mapping[str, Any], entry: Mapping[str, Any]) -> tuple[str, str, str]:
        """(folder, file stem, manifest value) of the ground-truth image ``row`` is compared with."""
        raise NotImplementedError

    def export(self, run: RunAnswers, out: Path) -> list[Path]:
        manifest = _manifest(run)
        written: list[Path] = []
        gts: dict[tuple[str, str], str] = {}
        for r in run.rows:
            if r["status"] != "scored" or r["id"] not in manifest:
                continue  # no edit (missing or unreadable): nothing to pair
            entry = manifest[r["id"]]
            folder, name = self._edit_name(r)
            if r["model"] == self.GT:  # the owners' script reads ground truth from there
                raise InputError(f"{r['id']}: a model named {self.GT!r} cannot be exported in this layout (its "
                                 f"{self.GT}/ folder holds the ground truth); rename the model in the run")
            target = inside(out, f"{r['model']}/{folder}/{name}", what=f"{r['id']}: exported edit path")
            written.append(_owner_image(_image_bytes(run, entry["edited"], "edited"), target))
            gfolder, gstem, gvalue = self._gt(run, r, entry)
            gts[(gfolder, gstem)] = gvalue
        for (gfolder, gstem), gvalue in sorted(gts.items()):
            target = inside(out, f"{self.GT}/{gfolder}/{gstem}", what="exported ground-truth path")
            written.append(_owner_image(_image_bytes(run, gvalue, "ground-truth"), target))
        return written

    def _rows(self, run: RunAnswers) -> dict[str, str] | None:
        return None

    def compare(self, run: RunAnswers, exported: Path, clone: Path, files: dict[str, Path],
                version: dict[str, Any], python: str, work: Path) -> tuple[list[Figure], list[str]]:
        models = [m for m in run.models() if (exported / m).is_dir()]
        figures = {f for sec in self._sections(run) for f in sec["figures"] if f in self.FIGURES}
        res = run_driver("pixel_distance", {
            "files": {"script": str(files["script"])}, "gt": str(exported / self.GT),
            "models": {m: str(exported / m) for m in models}, "settings": sorted(set(self.SETTINGS.values())),
            "metrics": sorted(self.FIGURES[f] for f in figures), "rows": self._rows(run)}, python, work)
        figs = []
        for model in models:
            for sec in self._sections(run, model):
                setting = self.SETTINGS.get(sec["name"])
                if setting is None:
                    continue
                owner = res["figures"].get(model, {}).get(setting, {})
                for row in [r["row"] for r in sec["rows"]] + ["overall"]:
                    for fig in sec["figures"]:
                        if fig not in self.FIGURES:
                            continue
                        f = Figure(model, sec["name"], row, fig, _cell(run.table, model, sec["name"], row, fig),
                                   _finite((owner.get(row) or {}).get(self.FIGURES[fig])))
                        if f.verdict == "DIFFERENT":
                            f.reason = ("the release pairs no edit with this row" if f.owner is None else
                                        "the same image pairs: the distance differs")
                        figs.append(f)
        return figs, list(res.get("notes") or []) + self.notes()

    def _sections(self, run: RunAnswers, model: str | None = None) -> list[dict[str, Any]]:
        models = [model] if model else run.models()
        out: dict[str, dict[str, Any]] = {}
        for m in models:
            for sec in run.table["models"].get(m, {}).get("sections", []):
                out.setdefault(sec["name"], sec)
        return list(out.values())

    def notes(self) -> list[str]:
        return []


@official
class MagicBrushOfficial(_PixelOfficial):
    name = "magicbrush"
    how_to_run = ("cd MagicBrush/evaluation && python image_eval.py --generated_path DIR/MODEL --gt_path DIR/gt "
                  "--metric l1,l2 (the all-turn figures; its final-turn setting needs the iterative edits of "
                  "`magicbrush-multiturn`)")
    SETTINGS = {"single-turn (every turn from its ground-truth input)": "all_turn"}
    KIND = "inde"

    def _edit_name(self, row: Mapping[str, Any]) -> tuple[str, str]:
        img_id, t = str(row["img_id"]), int(row["turn_index"])
        return img_id, f"{img_id}_1" if t == 1 else f"{img_id}_{self.KIND}_{t}"

    def _gt(self, run: RunAnswers, row: Mapping[str, Any], entry: Mapping[str, Any]) -> tuple[str, str, str]:
        img_id = str(row["img_id"])
        return img_id, f"{img_id}-output{int(row['turn_index'])}", str(entry["reference"])


@official
class MagicBrushMultiTurnOfficial(MagicBrushOfficial):
    name = "magicbrush-multiturn"
    how_to_run = ("cd MagicBrush/evaluation && python image_eval.py --generated_path DIR/MODEL --gt_path DIR/gt "
                  "--metric l1,l2 (its final-turn figures)")
    SETTINGS = {"multi-turn (each turn from the editor's previous output)": "iterative", "final turn": "final_turn"}
    KIND = "iter"

    def notes(self) -> list[str]:
        return ["the multi-turn section's owner values are image_eval.py's eval_distance on the pairs (iter_N, "
                "outputN): the release computes its all-turn setting from independent edits only"]


@official
class EmuEditOfficial(_PixelOfficial):
    name = "emu-edit"
    how_to_run = ("cd MagicBrush/evaluation && python image_eval.py --generated_path DIR/MODEL --gt_path DIR/gt "
                  "--metric l1 (Emu Edit publishes no scoring code: its L1 is the paper's input-vs-edited distance, "
                  "computed by MagicBrush's script with the source image in the place of the ground truth)")
    SETTINGS = {"test": "all_turn"}
    FIGURES = {"L1": "l1"}

    def _edit_name(self, row: Mapping[str, Any]) -> tuple[str, str]:
        return _key(row), f"{_key(row)}_1"

    def _gt(self, run: RunAnswers, row: Mapping[str, Any], entry: Mapping[str, Any]) -> tuple[str, str, str]:
        return _key(row), f"{_key(row)}-output1", str(entry["source"])

    def _rows(self, run: RunAnswers) -> dict[str, str] | None:
        return {_key(r): r["category"] for r in run.rows}

    def notes(self) -> list[str]:
        return ["Emu Edit publishes no scoring code: the owner values are MagicBrush's image_eval.py eval_distance "
                "(L1, the edit resized to the source's size) on (edit, source) pairs, the paper's definition"]


# ------------------------------------------------------------------------------------------------ entry points


def _known() -> dict[str, Any]:
    from importlib import resources

    return dict(json.loads(resources.files("editlens.bench").joinpath("official_scripts.json")
                           .read_text(encoding="utf-8")))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def recognise(benchmark: str, clone: Path) -> tuple[dict[str, Path], dict[str, Any]]:
    """The clone's scoring files for ``benchmark`` and the known version they are, or an error naming the
    file and the commit editlens was proved against."""
    known = _known().get(benchmark)
    if known is None:
        raise InputError(f"benchmark {benchmark!r}: editlens knows no owner's scoring files for it")
    if not clone.is_dir():
        raise InputError(f"--clone {clone}: not a folder (give your clone of {known['repository']})")
    files: dict[str, Path] = {}
    version: dict[str, Any] = {}
    for role, spec in known["files"].items():
        f = clone / spec["path"]
        commits = ", ".join(sorted({v["commit"][:12] for v in spec["versions"].values()}))
        if not f.is_file():
            raise InputError(f"--clone {clone}: {spec['path']} not found; expected a clone of "
                             f"https://github.com/{known['repository']} at commit {commits}")
        digest = sha256(f)
        if digest not in spec["versions"]:
            raise InputError(f"--clone {clone}: {spec['path']} is not a version editlens was checked against "
                             f"(sha256 {digest[:16]}...); expected {known['repository']} at commit {commits} "
                             f"(sha256 {', '.join(s[:16] + '...' for s in spec['versions'])}). Check out that "
                             "commit, or compare the figures yourself from `editlens bench export`")
        files[role] = f
        for k, v in spec["versions"][digest].items():  # the first (main) scoring file names the version
            version.setdefault(k, v)
    return files, version


def export_official(run: str | Path, out: str | Path) -> dict[str, Any]:
    """Write run ``run``'s judge answers in its benchmark owners' files under ``out``
    (see the module's table); returns ``{"benchmark", "files", "how_to_run"}``."""
    r = load_run(run)
    fmt = format_of(r.benchmark)
    if fmt.judged and not r.raw:
        raise InputError(f"{r.root}: the run has no judge answers stored (every item failed or was skipped); "
                         "rerun `editlens bench run` first")
    files = fmt.export(r, Path(out))
    res = {"benchmark": r.benchmark, "files": [str(f) for f in files], "how_to_run": fmt.how_to_run}
    if fmt.judged and not _official_prompts(r):
        res["note"] = ("the run asked editlens' own prompt wording (no --prompts-from): the owners' scripts may not "
                       "read its answers, and the figures are not comparable to the owners' leaderboards")
    return res


def _official_prompts(run: RunAnswers) -> bool:
    return bool((run.table.get("prompts") or {}).get("from_clone"))


def verify(run: str | Path, clone: str | Path, *, python: str | None = None,
           keep: str | Path | None = None) -> dict[str, Any]:
    """Every figure of run ``run`` beside the one the owners' code (from ``clone``) computes
    from the same judge answers. Returns ``{"benchmark", "figures": [...], "equal", "different",
    "notes", "version"}``; ``keep`` keeps the exported files and the owners' outputs there."""
    r = load_run(run)
    fmt = format_of(r.benchmark)
    files, version = recognise(r.benchmark, Path(clone))
    if fmt.judged and not _official_prompts(r):
        raise InputError(f"{r.root}: the run asked editlens' own prompt wording, not the owners' (it was run without "
                         "--prompts-from), so its answers are in editlens' format; rerun `editlens bench run ... "
                         "--prompts-from CLONE` to compare with the owners' code")
    with tempfile.TemporaryDirectory(prefix="editlens-verify-") as tmp:
        base = Path(keep) if keep else Path(tmp)
        exported, work = base / "exported", base / "owner"
        work.mkdir(parents=True, exist_ok=True)
        fmt.export(r, exported)
        figs, notes = fmt.compare(r, exported, Path(clone), files, version, python or sys.executable, work)
    rows = [f.to_dict() for f in figs]
    return {"benchmark": r.benchmark, "run": str(r.root), "clone": str(clone), "version": version,
            "answers": (r.table.get("answers") or {}).get("policy"), "figures": rows, "equal": sum(f["verdict"] == "EQUAL" for f in rows),
            "different": sum(f["verdict"] == "DIFFERENT" for f in rows), "notes": notes}


def verify_text(res: Mapping[str, Any]) -> str:
    """The terminal's table of :func:`verify`'s result."""
    def v(x: Any) -> str:
        return "–" if x is None else f"{x:.4f}"

    lines = [f"{res['benchmark']}: editlens' figures against the owners' code in {res['clone']} "
             f"(commit {str(res['version'].get('commit', ''))[:12]})"
             + (f"; judge answers read with --answers {res['answers']}" if res.get("answers") else ""), "",
             "| model | section | row | figure | editlens | owner | verdict | reason |", "|---|---|---|---|---|---|---|---|"]
    for f in res["figures"]:
        lines.append(f"| {f['model']} | {f['section']} | {f['row']} | {f['figure']} | {v(f['editlens'])} | "
                     f"{v(f['owner'])} | {f['verdict']} | {f['reason']} |")
    lines += ["", f"{res['equal']} EQUAL, {res['different']} DIFFERENT"]
    lines += [f"note: {n}" for n in res.get("notes") or ()]
    return "\n".join(lines) + "\n"
