"""Adapters that read human judgments and judge outputs of editing benchmarks.

Formats:

* **ImagenHub** text-guided editing: ``Text-Guided_IE_rater{1,2,3}.tsv`` with
  one row per sample uid and one column per method, cells ``[SC, PQ]``. The
  ``Imagic`` column holds placeholders and is excluded. Human O is the mean
  over raters of ``sqrt(SC * PQ)``.
* **VIEScore judge outputs**: ``<Method>/SC.json`` and ``<Method>/PQ.json``,
  each ``{uid: {"score": [...], "reasoning": ...}}``.
* **GenAI-Bench** result file: a JSON list of ``{idx, response, human_vote}``.
* **Generic point-wise** JSONL: ``{"id", "model", "human"}`` (AURORA-Bench
  point-wise scores fit this directly).
* **Generic pair-wise** JSONL: ``{"id", "a", "b", "preference"}`` with
  preference ``A``/``B``/``tie`` (or ``human`` = +1/-1/0); ``a`` and ``b``
  are prediction ids. AURORA-Bench and EditReward-Bench pairs fit this.
* **Predictions**: JSONL of ``{"id", "score"}``, or the ``results.jsonl`` of
  ``editlens run`` with ``metric=NAME`` choosing the score.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError
from editlens.meta.protocols import parse_score_list, viescore_overall

IMAGENHUB_EXCLUDED = ("Imagic",)


def _read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [row for _, row in iter_jsonl(path)]


@dataclass
class ImagenHubHuman:
    """Human scores per aspect ('SC', 'PQ', 'O') -> method -> uid, and the raw per-rater O."""

    scores: dict[str, dict[str, dict[str, float]]]
    per_rater_o: dict[str, dict[str, list[float]]] = field(default_factory=dict)


def load_imagenhub_human(ratings_dir: str | Path) -> ImagenHubHuman:
    d = Path(ratings_dir)
    files = sorted(d.glob("*rater*.tsv")) if d.is_dir() else []
    if not files:
        raise InputError(f"{d}: no rater TSV files (expected Text-Guided_IE_rater1.tsv, ...)")
    per: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for f in files:
        with open(f, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t")
            for lineno, row in enumerate(reader, 2):
                uid = row.pop("uid", None)
                if not uid:
                    raise InputError(f"{f}:{lineno}: missing uid")
                for method, cell in row.items():
                    if method in IMAGENHUB_EXCLUDED or method is None:
                        continue
                    vals = parse_score_list(cell)
                    if vals is None or len(vals) != 2:
                        raise InputError(f"{f}:{lineno}: cell for {method} is {cell!r}, expected [SC, PQ]")
                    per.setdefault(method, {}).setdefault(uid, []).append((vals[0], vals[1]))
    scores: dict[str, dict[str, dict[str, float]]] = {"SC": {}, "PQ": {}, "O": {}}
    per_o: dict[str, dict[str, list[float]]] = {}
    for method, items in per.items():
        for uid, ratings in items.items():
            sc = [r[0] for r in ratings]
            pq = [r[1] for r in ratings]
            o = [math.sqrt(a * b) for a, b in ratings]
            scores["SC"].setdefault(method, {})[uid] = float(np.mean(sc))
            scores["PQ"].setdefault(method, {})[uid] = float(np.mean(pq))
            scores["O"].setdefault(method, {})[uid] = float(np.mean(o))
            per_o.setdefault(method, {})[uid] = o
    return ImagenHubHuman(scores, per_o)


@dataclass
class JudgePredictions:
    """Predicted scores per aspect -> method -> uid, and the answers that could not be parsed."""

    scores: dict[str, dict[str, dict[str, float]]]
    unparsable: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0


def load_viescore_outputs(judge_dir: str | Path) -> JudgePredictions:
    d = Path(judge_dir)
    if not d.is_dir():
        raise InputError(f"{d}: judge-outputs directory not found (expected <Method>/SC.json and PQ.json)")
    scores: dict[str, dict[str, dict[str, float]]] = {"SC": {}, "PQ": {}, "O": {}}
    bad: list[dict[str, Any]] = []
    total = 0
    methods = sorted(p for p in d.iterdir() if p.is_dir() and p.name not in IMAGENHUB_EXCLUDED)
    if not methods:
        raise InputError(f"{d}: no method folders with SC.json/PQ.json")
    for mdir in methods:
        data = {}
        for aspect in ("SC", "PQ"):
            f = mdir / f"{aspect}.json"
            if not f.is_file():
                raise InputError(f"{f}: file not found")
            try:
                data[aspect] = json.loads(f.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise InputError(f"{f}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        for uid in sorted(set(data["SC"]) | set(data["PQ"])):
            total += 1
            sc_raw = (data["SC"].get(uid) or {}).get("score")
            pq_raw = (data["PQ"].get(uid) or {}).get("score")
            res = viescore_overall(sc_raw, pq_raw)
            if res is None:
                bad.append({"method": mdir.name, "uid": uid, "SC": sc_raw, "PQ": pq_raw})
                continue
            for aspect, v in zip(("SC", "PQ", "O"), res):
                scores[aspect].setdefault(mdir.name, {})[uid] = v
    return JudgePredictions(scores, bad, total)


def load_genai_results(path: str | Path) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        data = _read_jsonl(p)
    if not isinstance(data, list):
        raise InputError(f"{p}: expected a JSON list of items with idx, response, human_vote")
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "human_vote" not in item:
            raise InputError(f"{p}: item {i} has no human_vote")
    return data


def load_predictions(path: str | Path, metric: str | None = None) -> tuple[dict[str, float], dict[str, str], list[str]]:
    """Scores by id from ``{"id", "score"}`` lines or editlens ``results.jsonl``.

    Returns ``(scores, models, unscored_ids)``: ids whose score is missing,
    unscored or failed are listed, never given a number.
    """
    rows = _read_jsonl(path)
    scores: dict[str, float] = {}
    models: dict[str, str] = {}
    unscored: list[str] = []
    for n, row in enumerate(rows, 1):
        sid = row.get("id")
        if sid is None:
            raise InputError(f"{path}:{n}: missing 'id'")
        sid = str(sid)
        if row.get("model") is not None:
            models[sid] = str(row["model"])
        if "scores" in row:
            if metric is None:
                names = sorted(row["scores"])
                raise InputError(f"{path}: editlens results hold several scores {names}; choose one with --metric")
            entry = row["scores"].get(metric)
            value = entry.get("value") if isinstance(entry, dict) and entry.get("status") == "scored" else None
        else:
            value = row.get("score")
        if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
            unscored.append(sid)
            continue
        scores[sid] = float(value)
    return scores, models, unscored


def load_pointwise_human(path: str | Path) -> tuple[dict[str, float], dict[str, str]]:
    scores, models = {}, {}
    for n, row in enumerate(_read_jsonl(path), 1):
        if "id" not in row or "human" not in row:
            raise InputError(f"{path}:{n}: needs 'id' and 'human'")
        scores[str(row["id"])] = float(row["human"])
        models[str(row["id"])] = str(row.get("model", "all"))
    return scores, models


_PREF = {"a": 1, "left": 1, "leftvote": 1, "b": -1, "right": -1, "rightvote": -1, "tie": 0, "tievote": 0,
         "bothbad_vote": 0, "both_bad": 0, "equal": 0}


def load_pairwise_human(path: str | Path) -> list[dict[str, Any]]:
    """Pairs ``{"id", "a", "b", "label"}`` with label +1 (A), -1 (B), 0 (tie)."""
    out = []
    for n, row in enumerate(_read_jsonl(path), 1):
        if "a" not in row or "b" not in row:
            raise InputError(f"{path}:{n}: needs 'a' and 'b' (the ids of the two edits)")
        if "human" in row:
            label = int(row["human"])
        elif "preference" in row:
            key = str(row["preference"]).strip().lower()
            if key not in _PREF:
                raise InputError(f"{path}:{n}: preference {row['preference']!r} is not A, B or tie")
            label = _PREF[key]
        else:
            raise InputError(f"{path}:{n}: needs 'preference' (A/B/tie) or 'human' (+1/-1/0)")
        out.append({"id": str(row.get("id", n)), "a": str(row["a"]), "b": str(row["b"]), "label": label})
    return out


#: the four GenAI-Bench votes (and spellings of them) for readers that keep tie and both-bad apart
_VOTE4 = {"leftvote": "leftvote", "a": "leftvote", "left": "leftvote", "rightvote": "rightvote", "b": "rightvote",
          "right": "rightvote", "tievote": "tievote", "tie": "tievote", "bothbad_vote": "bothbad_vote",
          "both_bad": "bothbad_vote", "bothbad": "bothbad_vote"}


def load_pairwise_votes(path: str | Path) -> list[dict[str, Any]]:
    """Pairs ``{"id", "a", "b", "human_vote"}`` with the four GenAI-Bench
    votes kept apart (``tievote`` and ``bothbad_vote`` are different labels
    here, unlike :func:`load_pairwise_human`)."""
    out = []
    for n, row in enumerate(_read_jsonl(path), 1):
        if "a" not in row or "b" not in row:
            raise InputError(f"{path}:{n}: needs 'a' and 'b' (the ids of the two edits)")
        raw = row.get("human_vote", row.get("preference"))
        key = str(raw).strip().lower() if raw is not None else None
        if key not in _VOTE4:
            raise InputError(f"{path}:{n}: needs 'human_vote' or 'preference', one of leftvote, rightvote, tievote, "
                             f"bothbad_vote (A, B, tie, both_bad); got {raw!r}")
        out.append({"id": str(row.get("id", n)), "a": str(row["a"]), "b": str(row["b"]), "human_vote": _VOTE4[key]})
    return out
