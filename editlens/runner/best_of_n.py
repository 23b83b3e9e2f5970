"""Best of N, generated: an editor makes N images per edit (``editlens edit``),
an evaluator picks the best per edit, and every candidate's score is kept.

Point-wise evaluators score each candidate (:func:`editlens.adiee.reward.best_of_n`
picks by the spec's direction). A pairwise judge (``spec.pairwise``) runs a
knockout per edit: the first sample is the champion, each other sample
challenges it in turn and takes its place only on a ``B>A`` verdict (asked
in both presentation orders by default, so a verdict that flips with the
order is a tie and the champion stays); all matches are recorded.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.core.types import EditSample


def _candidate(s: EditSample) -> dict[str, Any]:
    return {"id": s.id, "model": s.model, "sample": s.metadata.get("sample"), "seed": s.metadata.get("seed"),
            "edited": str(s.edited)}


def pick_by_scores(samples: Sequence[EditSample], metric: Any, batch_size: int = 8) -> dict[str, Any]:
    """Score every candidate with a point-wise evaluator and pick the best per edit."""
    from editlens.adiee.reward import best_of_n
    from editlens.runner.reward import RewardFunction

    scores = RewardFunction(metric, batch_size).scores(samples)
    hib = metric.spec.higher_is_better
    by_id = {s.id: s for s in samples}
    picks = []
    for p in best_of_n(samples, scores, hib):
        d = asdict(p)
        d["candidates"] = [{**_candidate(by_id[c["id"]]), **c} for c in d["candidates"]]
        picks.append(d)
    failed = sum(1 for sc in scores if sc.status == "failed")
    return {"metric": metric.name, "kind": "scores", "higher_is_better": hib, "picks": picks, "failed": failed}


def knockout(samples: Sequence[EditSample], comparer: Any, batch_size: int = 8) -> dict[str, Any]:
    """A knockout per edit (``group``) with a pairwise ``comparer`` (``.compare(items, batch_size)``, ``.name``)."""
    from editlens.adiee.reward import group_key
    from editlens.runner.compare import PairItem

    groups: dict[str, list[EditSample]] = {}
    for s in samples:
        groups.setdefault(group_key(s), []).append(s)
    champion = {g: 0 for g in groups}
    nxt = {g: 1 for g in groups}
    tally = {s.id: {"wins": 0, "losses": 0, "ties": 0} for s in samples}
    matches: dict[str, list[dict[str, Any]]] = {g: [] for g in groups}
    failed = 0
    while True:
        round_ = [(g, members[champion[g]], members[nxt[g]]) for g, members in groups.items()
                  if nxt[g] < len(members)]
        if not round_:
            break
        items = [PairItem(f"{a.id} vs {b.id}", str(a.source), str(a.edited), str(b.edited), a.instruction)
                 for _, a, b in round_]
        for (g, a, b), v in zip(round_, comparer.compare(items, batch_size), strict=True):
            verdict = v.get("verdict")
            matches[g].append({"a": a.id, "b": b.id, "verdict": verdict, "consistent": v.get("consistent"),
                               "orders": v.get("orders"), "reason": v.get("reason"), "failed": bool(v.get("failed"))})
            failed += bool(v.get("failed"))
            if verdict == "B>A":
                tally[b.id]["wins"] += 1
                tally[a.id]["losses"] += 1
                champion[g] = nxt[g]
            elif verdict == "A>B":
                tally[a.id]["wins"] += 1
                tally[b.id]["losses"] += 1
            else:  # a tie, a verdict that flips with the order, or none: the champion stays
                tally[a.id]["ties"] += 1
                tally[b.id]["ties"] += 1
            nxt[g] += 1
    picks = []
    for g, members in groups.items():
        best = members[champion[g]]
        picks.append({"group": g, "best_id": best.id, "best_value": None, "matches": matches[g],
                      "candidates": [{**_candidate(s), **tally[s.id]} for s in members]})
    return {"metric": comparer.name, "kind": "knockout", "higher_is_better": None, "picks": picks, "failed": failed}


def best_of_generated(
    edits_manifest: str | Path,
    metric: str,
    *,
    models: Mapping[str, str] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    device: str = "auto",
    dtype: str = "auto",
    vlm: Mapping[str, Any] | None = None,
    orders: str = "both",
    batch_size: int = 8,
) -> dict[str, Any]:
    """Pick the best candidate per edit of an ``editlens edit`` manifest with
    any evaluator (point-wise, or a pairwise judge through a knockout)."""
    from editlens.data.manifest import read_manifest
    from editlens.metrics.registry import get_spec

    samples = read_manifest(edits_manifest).samples
    if get_spec(metric).pairwise:
        from editlens.runner.compare import JudgeComparer

        judge_options = {**(vlm or {}), "orders": orders, **dict((options or {}).get(get_spec(metric).name, {}))}
        return knockout(samples, JudgeComparer(judge_options), batch_size)
    from editlens.runner.selection import select_metrics

    sel = select_metrics([metric], models=dict(models or {}), options=dict(options or {}), device=device, dtype=dtype,
                         vlm=vlm)
    if not sel.metrics:
        from editlens.errors import InputError

        reason = "; ".join(f"{n}: {r}" for n, r in sel.skipped) or "not available"
        raise InputError(f"metric {metric} cannot run: {reason}")
    return pick_by_scores(samples, sel.metrics[0], batch_size)


def score_manifest(manifest: str | Path, metric: str, *, models: Mapping[str, str] | None = None,
                   options: Mapping[str, Mapping[str, Any]] | None = None, device: str = "auto",
                   dtype: str = "auto", batch_size: int = 8, limit: int | None = None) -> tuple[list[EditSample],
                                                                                                  list[Any], Any]:
    """Every edit of ``manifest`` scored by the registered evaluator ``metric`` (built as the runner builds
    it: model roles, options): ``(samples, scores, evaluator)``. ``limit``: the candidates of the first N
    groups (edits) only."""
    from editlens.adiee.reward import group_key
    from editlens.data.manifest import read_manifest
    from editlens.runner.reward import RewardFunction
    from editlens.runner.selection import select_metrics

    rep = read_manifest(manifest)
    if limit is not None:  # the candidates of the first N groups (edits)
        keep = set(list(dict.fromkeys(group_key(s) for s in rep.samples))[:limit])
        rep.samples = [s for s in rep.samples if group_key(s) in keep]
    sel = select_metrics([metric], models=dict(models or {}), options=dict(options or {}), device=device, dtype=dtype)
    m = sel.metrics[0]
    return rep.samples, RewardFunction(m, batch_size).scores(rep.samples), m


def best_of_manifest(manifest: str | Path, metric: str, *, models: Mapping[str, str] | None = None,
                     options: Mapping[str, Mapping[str, Any]] | None = None, device: str = "auto",
                     dtype: str = "auto", batch_size: int = 8, limit: int | None = None,
                     out: str | Path | None = None) -> dict[str, Any]:
    """Best of N over candidates made already: the candidates of one source and instruction (or one
    ``group`` column value) compete, scored by ``metric``. Returns (and with ``out`` writes, atomically)
    ``{"metric", "higher_is_better", "picks"}``, each pick with every candidate's score."""
    from editlens.adiee.reward import best_of_n

    samples, scores, m = score_manifest(manifest, metric, models=models, options=options, device=device, dtype=dtype,
                                        batch_size=batch_size, limit=limit)
    picks = best_of_n(samples, scores, m.spec.higher_is_better)
    doc = {"metric": metric, "higher_is_better": m.spec.higher_is_better, "picks": [asdict(p) for p in picks]}
    if out:
        import json

        from editlens.core.io import atomic_write

        atomic_write(out, lambda fh: json.dump(doc, fh, indent=2, default=str))
    return doc
