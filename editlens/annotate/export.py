"""People's votes as the files editlens' consumers read (``editlens annotate export``), and the people's
arena (``editlens arena --human-votes DIR``).

Only the first answer of each annotator to each regular item counts: hidden repeats and gold items are
checks, not labels.

* ``pointwise`` -> ``human.jsonl`` ``{id, model, human, n_raters, scores, group}``: ``human`` is the mean
  over raters of each rater's overall value (ImagenHub's O = sqrt(SC * PQ) per rater; the single criterion
  of a Likert preset), or of one ``criterion``; ``group`` is the source (calibrate's folds). Read by
  ``meta-eval pointwise`` and ``calibrate pointwise``.
* ``pairwise`` -> ``pairs.jsonl`` ``{id, a, b, preference: A|B|tie, votes, source, edited_a, edited_b,
  instruction}``: the majority of A, B and no winner (tie or both bad); no strict majority is a tie. Read by
  ``meta-eval pairwise``, ``calibrate pairwise`` and ``editlens compare --pairs``.
* ``genai-bench`` -> ``genai_bench.json``: GenAI-Bench's items ``{idx, human_vote, response}`` with the four
  outcomes (leftvote = A, the pair's first edit); an item without a strict majority of one outcome is left
  out and counted. ``response`` holds the judged answer to measure: a pairwise judge's verdicts (``editlens
  compare --pairs pairs.jsonl --out FILE``) or an evaluator's scores of the two edits. Read by ``meta-eval
  genai-bench``.
* ``arena`` -> ``arena.json``, ``comparisons.jsonl`` (the people's arena: Bradley-Terry with the arena's own
  code) and ``human_ranking.json`` ``{editor: rating}``, which ``arena --human-ranking`` and ``meta-eval
  arena --human-ranking`` read.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

from editlens.annotate.presets import overall
from editlens.errors import InputError

FORMATS = ("pointwise", "pairwise", "genai-bench", "arena")
GENAI_VOTE = {"A": "leftvote", "B": "rightvote", "tie": "tievote", "both_bad": "bothbad_vote"}


def first_votes(folder: str | Path) -> tuple[Any, dict[str, list[dict[str, Any]]]]:
    """``(task, {item: [first vote of each annotator]})`` of the regular items."""
    from editlens.annotate.task import Task

    t = Task(folder)
    seen: set[tuple[str, str]] = set()
    by_item: dict[str, list[dict[str, Any]]] = {}
    for v in t.store.votes():
        if v["kind"] != "item" or (v["annotator"], v["item"]) in seen:
            continue
        seen.add((v["annotator"], v["item"]))
        by_item.setdefault(v["item"], []).append(v)
    return t, by_item


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    from editlens.core.io import atomic_write

    atomic_write(path, lambda fh: fh.writelines(json.dumps(r) + "\n" for r in rows))


def pointwise_rows(task: Any, by_item: Mapping[str, list[dict[str, Any]]], criterion: str | None = None
                   ) -> list[dict[str, Any]]:
    names = [c["name"] for c in task.preset["criteria"]]
    if criterion is not None and criterion not in names:
        raise InputError(f"--criterion {criterion!r}: this preset's criteria are {', '.join(names)}")
    rows = []
    for iid, votes in by_item.items():
        it = task.items[iid]
        given = [(v["answer"]["scores"][criterion] if criterion else overall(task.preset, v["answer"]["scores"]))
                 for v in votes]
        per_rater = [float(x) for x in given if x is not None]
        if not per_rater:
            continue
        rows.append({"id": iid, "model": it["model"] or "all", "human": statistics.fmean(per_rater),
                     "n_raters": len(per_rater),
                     "scores": {n: statistics.fmean(v["answer"]["scores"][n] for v in votes) for n in names},
                     "group": it["source"], "instruction": it["instruction"]})
    return rows


def majority_pair(votes: list[dict[str, Any]]) -> tuple[str, dict[str, int]]:
    """``(A|B|tie, counts of the four outcomes)``: A or B with a strict majority over each other side, else tie.

    >>> majority_pair([{"answer": {"choice": c}} for c in ("A", "A", "B")])[0]
    'A'
    >>> majority_pair([{"answer": {"choice": c}} for c in ("A", "both_bad")])[0]
    'tie'
    """
    counts = Counter(v["answer"]["choice"] for v in votes)
    full = {k: int(counts.get(k, 0)) for k in GENAI_VOTE}
    none = full["tie"] + full["both_bad"]
    if full["A"] > max(full["B"], none):
        return "A", full
    if full["B"] > max(full["A"], none):
        return "B", full
    return "tie", full


def pairwise_rows(task: Any, by_item: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for iid, votes in by_item.items():
        it = task.items[iid]
        pref, counts = majority_pair(votes)
        rows.append({"id": iid, "a": it["a"]["id"], "b": it["b"]["id"], "preference": pref, "votes": counts,
                     "editor_a": it["a"]["editor"], "editor_b": it["b"]["editor"],
                     "source": it["source"], "edited_a": it["a"]["edited"], "edited_b": it["b"]["edited"],
                     "instruction": it["instruction"]})
    return rows


def _responses(verdicts: Path | None, predictions: Path | None, metric: str | None) -> Any:
    """``response(row) -> str | None``: the judged answer of a pair, in GenAI-Bench's ``[[...]]`` form."""
    if verdicts is not None:
        from editlens.bench.labels import load_verdicts

        found = load_verdicts(verdicts)

        def from_judge(row: Mapping[str, Any]) -> str | None:
            v = found.get(row["id"])
            if v is None:
                return None
            raw = v.get("raw") or v.get("answer")
            verdict = v.get("verdict")
            return str(raw) if raw and "[[" in str(raw) else (f"[[{verdict}]]" if verdict else None)
        return from_judge
    if predictions is not None:
        from editlens.bench.labels import load_predictions
        from editlens.meta.direction import oriented

        scores = oriented(load_predictions(predictions, metric)[0], metric)

        def from_scores(row: Mapping[str, Any]) -> str | None:
            a, b = scores.get(row["a"]), scores.get(row["b"])
            if a is None or b is None:
                return None
            return "[[A>B]]" if a > b else "[[B>A]]" if b > a else "[[A=B]]"
        return from_scores
    raise InputError("--format genai-bench measures a judge: give --verdicts (editlens compare --pairs PAIRS --out "
                     "FILE) or --predictions (results.jsonl or {id, score}) with --metric")


def genai_rows(task: Any, by_item: Mapping[str, list[dict[str, Any]]], response: Any) -> tuple[list[dict], int]:
    rows, ambiguous = [], 0
    for iid, votes in by_item.items():
        counts = Counter(v["answer"]["choice"] for v in votes)
        top = counts.most_common()
        if len(top) > 1 and top[0][1] == top[1][1]:
            ambiguous += 1
            continue
        it = task.items[iid]
        row = {"idx": iid, "human_vote": GENAI_VOTE[top[0][0]], "a": it["a"]["id"], "b": it["b"]["id"],
               "instruction": it["instruction"], "votes": dict(counts)}
        row["response"] = response({"id": iid, **row})
        rows.append(row)
    return rows, ambiguous


def people_arena(folder: str | Path, out: str | Path | None = None, *, ties: str = "davidson", n_boot: int = 200,
                 seed: int = 0, human: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Rank the editors from the people's pairwise votes with the arena's Bradley-Terry code; write
    ``arena.json`` and ``comparisons.jsonl`` (default ``folder/arena``). Returns the arena document."""
    from editlens.annotate.plan import vote_outcome
    from editlens.runner.arena import Contest, _Judged, ratings_document, write_outputs

    t, by_item = first_votes(folder)
    try:
        if t.settings["task"] != "pairwise":
            raise InputError(f"{folder}: a point-wise task; an arena needs pairwise votes")
        groups: dict[str, Contest] = {}
        for iid in by_item:
            it = t.items[iid]
            c = groups.setdefault(it["group"], Contest(it["group"], it["source"], it["instruction"]))
            for side in ("a", "b"):
                c.edits[it[side]["editor"]] = it[side]["edited"]
                c.ids[it[side]["editor"]] = it[side]["id"]
        if not groups:
            raise InputError(f"{folder}: no pairwise vote yet")
        contests = list(groups.values())
        ci = {c.key: k for k, c in enumerate(contests)}
        editors = sorted({m for c in contests for m in c.edits})
        idx = {m: k for k, m in enumerate(editors)}
        judged = []
        for iid, votes in by_item.items():
            it = t.items[iid]
            for v in votes:
                o = vote_outcome(it, v["answer"])
                judged.append(_Judged(ci[it["group"]], idx[it["a"]["editor"]], idx[it["b"]["editor"]],
                                      {"label": o, "verdict": v["answer"]["choice"], "annotator": v["annotator"],
                                       "reason": v["reason"]}))
        doc = ratings_document(editors, contests, judged, ties=ties, n_boot=n_boot, seed=seed, human=human)
        doc.update({"judge": "people", "judge_identity": {"annotate": str(Path(folder).name),
                                                          "annotators": sorted({v["annotator"] for vs in by_item.values() for v in vs})},
                    "input": {"manifest": Path(t.settings["manifest"]).name, "run": t.settings.get("run"),
                              "votes": str(folder), "notes": [], "noop": {}},
                    "schedule": {"rounds": 0, "stopped": "people's votes", "stop_at": None, "budget": None,
                                 "round_size": None, "seed": seed, "comparisons": len(judged),
                                 "all_pairs": len(t.items), "asked": len(judged), "cached": 0}})
        dest = Path(out) if out is not None else Path(folder) / "arena"
        dest.mkdir(parents=True, exist_ok=True)
        write_outputs(doc, judged, contests, editors, dest)
        return doc
    finally:
        t.close()


def export(folder: str | Path, fmt: str, out: str | Path | None = None, *, criterion: str | None = None,
           verdicts: Path | None = None, predictions: Path | None = None, metric: str | None = None,
           ties: str = "davidson", n_boot: int = 200, seed: int = 0) -> dict[str, Any]:
    """Write the ``fmt`` files of ``folder``'s votes under ``out`` (default ``folder/export``); returns a summary
    ``{format, files, rows, ...}``."""
    from editlens.core.io import atomic_write

    if fmt not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    dest = Path(out) if out is not None else Path(folder) / "export"
    if fmt == "arena":
        doc = people_arena(folder, dest, ties=ties, n_boot=n_boot, seed=seed)
        ranking = {r["editor"]: r["rating"] for r in doc["editors"] if r["rank"] is not None}
        atomic_write(dest / "human_ranking.json", lambda fh: json.dump(ranking, fh, indent=1))
        return {"format": fmt, "files": [str(dest / n) for n in ("arena.json", "comparisons.jsonl", "human_ranking.json")],
                "rows": len(ranking), "comparisons": doc["verdicts"]["comparisons"]}
    t, by_item = first_votes(folder)
    try:
        kind = t.settings["task"]
        need = "pointwise" if fmt == "pointwise" else "pairwise"
        if kind != need:
            raise InputError(f"{folder}: a {kind} task; --format {fmt} needs a {need} task")
        if not by_item:
            raise InputError(f"{folder}: no vote on a regular item yet; nothing to export")
        dest.mkdir(parents=True, exist_ok=True)
        if fmt == "pointwise":
            rows = pointwise_rows(t, by_item, criterion)
            _write_jsonl(dest / "human.jsonl", rows)
            return {"format": fmt, "files": [str(dest / "human.jsonl")], "rows": len(rows)}
        if fmt == "pairwise":
            rows = pairwise_rows(t, by_item)
            _write_jsonl(dest / "pairs.jsonl", rows)
            return {"format": fmt, "files": [str(dest / "pairs.jsonl")], "rows": len(rows)}
        rows, ambiguous = genai_rows(t, by_item, _responses(verdicts, predictions, metric))
        atomic_write(dest / "genai_bench.json", lambda fh: json.dump(rows, fh, indent=1))
        return {"format": fmt, "files": [str(dest / "genai_bench.json")], "rows": len(rows),
                "left_out_no_majority": ambiguous,
                "without_response": sum(1 for r in rows if r["response"] is None)}
    finally:
        t.close()
