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


def number(value: Any, where: str, field_name: str) -> float:
    """A finite number read from ``field_name`` at ``where`` (``file:line``); a boolean, a
    string, null, NaN or infinity is refused with the place named, never read as a number.

    >>> number(3, "h.jsonl:2", "human")
    3.0
    >>> number(True, "h.jsonl:2", "human")
    Traceback (most recent call last):
    editlens.errors.InputError: h.jsonl:2: field 'human' is true, not a number
    """
    if isinstance(value, bool):
        raise InputError(f"{where}: field {field_name!r} is {str(value).lower()}, not a number")
    if not isinstance(value, (int, float)):
        shown = "null" if value is None else repr(value)
        raise InputError(f"{where}: field {field_name!r} is {shown}, not a number")
    if not math.isfinite(value):
        raise InputError(f"{where}: field {field_name!r} is {value}, not a finite number")
    return float(value)


def keep_once(seen: dict[str, tuple[Any, str]], key: str, value: Any, where: str, what: str = "id") -> bool:
    """Record ``key`` -> ``value`` read at ``where``. A repeat with the same value is
    ``False`` (the caller skips it: the same fact twice); a repeat with another value is
    refused, naming both places, since either choice would be a silent guess."""
    if key in seen:
        old, first = seen[key]
        if old != value:
            raise InputError(f"{where}: {what} {key!r} repeated with another value ({value!r}; "
                             f"{old!r} at {first}); remove one of them")
        return False
    seen[key] = (value, where)
    return True


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
        seen: dict[str, tuple[Any, str]] = {}
        with open(f, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh, delimiter="\t")
            for lineno, row in enumerate(reader, 2):
                uid = row.pop("uid", None)
                if not uid:
                    raise InputError(f"{f}:{lineno}: missing uid")
                cells = {m: c for m, c in row.items() if m is not None and m not in IMAGENHUB_EXCLUDED}
                # one rater rating one sample twice would count as two raters
                if not keep_once(seen, uid, cells, f"{f}:{lineno}", "uid"):
                    continue
                for method, cell in cells.items():
                    vals = parse_score_list(cell)
                    if vals is None or len(vals) != 2:
                        raise InputError(f"{f}:{lineno}: cell for {method} is {cell!r}, expected [SC, PQ]")
                    if any(v < 0 for v in vals):
                        raise InputError(f"{f}:{lineno}: cell for {method} is {cell!r}: a rating is negative")
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
    seen: dict[str, tuple[Any, str]] = {}
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or "human_vote" not in item:
            raise InputError(f"{p}: item {i} has no human_vote")
        if item.get("idx") is not None and not keep_once(
                seen, str(item["idx"]), (item.get("human_vote"), item.get("response")), f"{p}: item {i}", "idx"):
            continue  # the same item twice counts once
        out.append(item)
    return out


def load_predictions(path: str | Path, metric: str | None = None) -> tuple[dict[str, float], dict[str, str], list[str]]:
    """Scores by id from ``{"id", "score"}`` lines or editlens ``results.jsonl``.

    Returns ``(scores, models, unscored_ids)``: ids whose score is missing,
    unscored or failed are listed, never given a number.
    """
    scores: dict[str, float] = {}
    models: dict[str, str] = {}
    unscored: list[str] = []
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        sid = row.get("id")
        if sid is None:
            raise InputError(f"{path}:{n}: missing 'id'")
        sid = str(sid)
        given = row["scores"].get(metric) if "scores" in row and isinstance(row["scores"], dict) else row.get("score")
        if not keep_once(seen, sid, given, f"{path}:{n}"):
            continue
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
            if isinstance(value, bool) or (isinstance(value, (int, float)) and not math.isfinite(value)):
                raise InputError(f"{path}:{n}: field 'score' is {json.dumps(value)}, not a finite number "
                                 "(leave it out or null for an unscored edit)")
            if value is not None and not isinstance(value, (int, float)):
                raise InputError(f"{path}:{n}: field 'score' is {value!r}, not a number")
        if value is None or not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            unscored.append(sid)
            continue
        scores[sid] = float(value)
    return scores, models, unscored


def load_pointwise_human(path: str | Path) -> tuple[dict[str, float], dict[str, str]]:
    scores, models = {}, {}
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        if "id" not in row or "human" not in row:
            raise InputError(f"{path}:{n}: needs 'id' and 'human'")
        value = number(row["human"], f"{path}:{n}", "human")
        sid = str(row["id"])
        if keep_once(seen, sid, (value, str(row.get("model", "all"))), f"{path}:{n}"):
            scores[sid] = value
            models[sid] = str(row.get("model", "all"))
    return scores, models


_PREF = {"a": 1, "left": 1, "leftvote": 1, "b": -1, "right": -1, "rightvote": -1, "tie": 0, "tievote": 0,
         "bothbad_vote": 0, "both_bad": 0, "equal": 0}


def load_pairwise_human(path: str | Path) -> list[dict[str, Any]]:
    """Pairs ``{"id", "a", "b", "label"}`` with label +1 (A), -1 (B), 0 (tie)."""
    out = []
    seen: dict[str, tuple[Any, str]] = {}
    for n, row in iter_jsonl(path):
        if "a" not in row or "b" not in row:
            raise InputError(f"{path}:{n}: needs 'a' and 'b' (the ids of the two edits)")
        if str(row["a"]) == str(row["b"]):
            raise InputError(f"{path}:{n}: fields 'a' and 'b' are the same edit {row['a']!r}; a pair compares two edits")
        if "human" in row:
            value = number(row["human"], f"{path}:{n}", "human")
            if value not in (1.0, -1.0, 0.0):
                raise InputError(f"{path}:{n}: field 'human' is {row['human']!r}; expected +1 (A), -1 (B) or 0 (tie)")
            label = int(value)
        elif "preference" in row:
            key = str(row["preference"]).strip().lower()
            if key not in _PREF:
                raise InputError(f"{path}:{n}: preference {row['preference']!r} is not A, B or tie")
            label = _PREF[key]
        else:
            raise InputError(f"{path}:{n}: needs 'preference' (A/B/tie) or 'human' (+1/-1/0)")
        pair_id, a, b = str(row.get("id", n)), str(row["a"]), str(row["b"])
        pair = {"id": pair_id, "a": a, "b": b, "label": label}
        if keep_once(seen, pair_id, (a, b, label), f"{path}:{n}", "pair id"):
            out.append(pair)
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
