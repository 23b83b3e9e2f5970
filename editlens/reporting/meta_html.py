"""The extra data a meta-evaluation report plots: predicted-vs-human points
(point-wise) and the confusion of pairwise verdicts (pair-wise), read from
the same files the meta-evaluation read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from editlens.core.io import read_json
from editlens.errors import InputError
from editlens.meta import benchmarks as B

#: pairwise labels in display order: +1 = A better, 0 = tie, -1 = B better
PAIR_LABELS = ((1, "A better"), (0, "tie"), (-1, "B better"))


def pointwise_points(human_path: str | Path, pred_path: str | Path, metric: str | None = None) -> list[tuple[float, float, str]]:
    """``(predicted, human, group)`` for every item with both scores."""
    human, groups = B.load_pointwise_human(human_path)
    scores, _, _ = B.load_predictions(pred_path, metric)
    return [(scores[i], human[i], groups[i]) for i in sorted(set(human) & set(scores))]


def pairwise_confusion(human_path: str | Path, pred_path: str | Path, threshold: float,
                       metric: str | None = None) -> dict[str, Any]:
    """Counts of (human label, predicted label) over scored pairs; a predicted
    tie is ``|score(A) - score(B)| <= threshold`` (the calibrated threshold).

    Rows are the human labels, columns the predicted ones, both in
    :data:`PAIR_LABELS` order.
    """
    from editlens.meta.direction import oriented

    pairs = B.load_pairwise_human(human_path)
    scores = oriented(B.load_predictions(pred_path, metric)[0], metric)  # as the accuracy it shows beside
    index = {lab: i for i, (lab, _) in enumerate(PAIR_LABELS)}
    m = np.zeros((3, 3), dtype=int)
    for p in pairs:
        if p["a"] in scores and p["b"] in scores:
            d = scores[p["a"]] - scores[p["b"]]
            pred = 0 if abs(d) <= threshold else int(np.sign(d))
            m[index[p["label"]], index[pred]] += 1
    return {"labels": [name for _, name in PAIR_LABELS], "matrix": m.tolist(), "threshold": threshold}


def describe_evaluated(*, predictions: str | Path | None = None, metric: str | None = None,
                       judge_outputs: str | Path | None = None, verdicts: str | Path | None = None,
                       human: str | Path | None = None) -> dict[str, Any]:
    """Which evaluator a meta-evaluation measures and where its answers came from (file names
    only: a report must not carry the paths of the machine it was made on). For an editlens
    run's ``results.jsonl``, the run's ``manifest.json`` beside it adds the evaluator's model.

    >>> describe_evaluated(predictions="/data/run/preds.jsonl", human="/data/h.jsonl")
    {'evaluator': 'score column', 'answers': 'preds.jsonl', 'human': 'h.jsonl'}
    """
    out: dict[str, Any] = {}
    if judge_outputs is not None:
        out.update(evaluator="judge answers (VIEScore-style SC/PQ outputs)", answers=Path(judge_outputs).name)
    elif verdicts is not None:
        out.update(evaluator="pairwise judge verdicts", answers=Path(verdicts).name)
    elif predictions is not None:
        out.update(evaluator=metric or "score column", answers=Path(predictions).name)
        run_manifest = Path(predictions).parent / "manifest.json"
        if metric and run_manifest.is_file():
            try:
                doc = read_json(run_manifest, "the run's manifest")
            except InputError:  # the report still renders, without the model's name
                doc = {}
            entries = (doc.get("evaluators") if isinstance(doc, dict) else None) or []
            entry = next((e for e in entries if isinstance(e, dict) and e.get("name") == metric), None)
            opts = (entry or {}).get("options") or {}
            model = {k: Path(str(v)).name for k, v in opts.items() if k in ("vlm", "vlm_model", "model", "models")
                     and v and not isinstance(v, (dict, list))}
            if model:
                out["model"] = model
            out["run"] = Path(predictions).parent.name
    if human is not None:
        out["human"] = Path(human).name
    return out


def without_local_paths(obj: Any) -> Any:
    """``obj`` with every absolute path string replaced by its file name (for pages that travel).

    >>> without_local_paths({"instructions_from": "/home/me/data/samples.jsonl", "n": 3, "note": "a/b"})
    {'instructions_from': 'samples.jsonl', 'n': 3, 'note': 'a/b'}
    """
    if isinstance(obj, str):
        looks_absolute = obj.startswith("/") or (len(obj) > 2 and obj[1] == ":" and obj[2] in "/\\")
        return Path(obj).name if looks_absolute and "\n" not in obj and " " not in obj.strip() else obj
    if isinstance(obj, dict):
        return {k: without_local_paths(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [without_local_paths(v) for v in obj]
    return obj
