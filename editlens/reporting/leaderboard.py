"""Leaderboards of editing models that cannot be won by doing nothing.

Only evaluators whose spec says they measure edit quality, instruction
following or agreement with a reference edit rank editors; a similarity to
the source is best for an editor that changes nothing, so those scores are
reported beside, labelled, never ranked. Editors whose edits an
``unchanged_at`` evaluator (the change map) finds unchanged are flagged, and
an editor all of whose checked edits are unchanged (a no-op) is listed below
the ranking, not in it.

Each ranked table gives, per editor, the mean of its scored edits with a
seeded percentile-bootstrap 95% CI (the numbers of ``runs summary --by
model``), and between neighbours a **paired bootstrap test over the sources
both editors edited**: per shared source (same source image and
instruction) the difference of their scores, resampled with replacement;
two-sided p-value, significant below 0.05. Everything is remembered by content
in the report's cache.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from editlens.metrics.spec import RANKED_MEASURES
from editlens.reporting.memo import Memo

#: how the neighbour comparison is made, in the report's words
TEST = ("paired bootstrap over the sources both editors edited (same source image and instruction): "
        "the mean per-source score difference, 1,000 seeded resamples, two-sided p; significant when p < 0.05")
ALL = "all"


def _scopes(samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    scopes = [{"key": ALL, "label": "all edits", "n": len(samples)}]
    cats: dict[str, int] = {}
    for s in samples:
        if "category" in s:
            cats[s["category"]] = cats.get(s["category"], 0) + 1
    scopes += [{"key": f"type:{c}", "label": c, "n": n} for c, n in sorted(cats.items())]
    return scopes


def _in_scope(s: Mapping[str, Any], key: str) -> bool:
    return key == ALL or s.get("category") == key[len("type:"):]


def noop_flags(samples: Sequence[Mapping[str, Any]], models: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per editor: how many of its edits were checked for change (an evaluator declaring
    ``unchanged_at`` scored them) and how many were found unchanged, by which evaluators."""
    out: dict[str, dict[str, Any]] = {}
    for m in models:
        checked = unchanged = 0
        by: set[str] = set()
        for s in samples:
            if s["model"] != m:
                continue
            found = s.get("unchanged") or []
            if found or s.get("change_checked"):
                checked += 1
            if found:
                unchanged += 1
                by.update(found)
        if checked:
            out[m] = {"checked": checked, "unchanged": unchanged, "by": sorted(by), "noop": unchanged == checked}
    return out


def leaderboards(samples: Sequence[Mapping[str, Any]], evaluators: Sequence[str], measures: Mapping[str, str | None],
                 higher_is_better: Mapping[str, bool | None], models: Sequence[str], *, seed: int = 0,
                 n_boot: int = 1000, source_totals: Mapping[str, int] | None = None,
                 memo: Memo | None = None) -> dict[str, Any]:
    """Ranked tables per (scope, evaluator), where a scope is all edits or one category.
    ``source_totals``: sources per scope in the whole manifest (default: those of ``samples``),
    so each row says how many of them its editor was scored on. ``memo``: the report's
    :attr:`~editlens.reporting.memo.ReportCache.stats` (bootstraps remembered by content)."""
    from editlens.reporting.stats import cached_bootstrap_ci, paired_bootstrap

    ranked = [e for e in evaluators if measures.get(e) in RANKED_MEASURES and higher_is_better.get(e) is not None]
    unranked = [e for e in evaluators if e not in ranked and measures.get(e) != "none"]
    scopes = _scopes(samples)
    tables = []
    noop = {}
    for scope in scopes:
        subset = [s for s in samples if _in_scope(s, scope["key"])]
        noop[scope["key"]] = noop_flags(subset, models)
        for ev in ranked:
            hib = bool(higher_is_better[ev])
            vals: dict[str, list[tuple[str, float, int]]] = {}
            for s in subset:
                sc = s["scores"].get(ev)
                if sc is not None and sc.get("status") == "scored":
                    vals.setdefault(s["model"], []).append((s["id"], float(sc["value"]), s.get("group", -1)))
            if not vals:
                continue
            rows: list[dict[str, Any]] = []
            # coverage: the sources (compare groups) of this scope each editor was scored on
            total = max((source_totals or {}).get(scope["key"], 0), len({s.get("group", s["id"]) for s in subset}))
            for m, v in vals.items():
                v.sort()
                x = [t[1] for t in v]
                ci = list(cached_bootstrap_ci(x, n_boot=n_boot, seed=seed, memo=memo)) if len(x) >= 2 else None
                rows.append({"model": m, "n": len(x), "mean": sum(x) / len(x), "ci": ci,
                             "sources": len({g for _, _, g in v}), "of_sources": total})
            rows.sort(key=lambda r: (-r["mean"] if hib else r["mean"], r["model"]))
            # an editor that changed nothing is listed, flagged and left out of the ranking
            flags = noop[scope["key"]]
            ranked_rows = [r for r in rows if not flags.get(r["model"], {}).get("noop")]
            for r in rows:
                r["rank"] = None
            for i, r in enumerate(ranked_rows, 1):
                r["rank"] = i
            rows = ranked_rows + [r for r in rows if r["rank"] is None]
            pairs = []
            for a, b in zip(ranked_rows, ranked_rows[1:]):
                ga = _per_group(vals[a["model"]])
                gb = _per_group(vals[b["model"]])
                shared = sorted(set(ga) & set(gb))
                sign = 1.0 if hib else -1.0  # positive: the upper editor is better
                test = paired_bootstrap([sign * (ga[g] - gb[g]) for g in shared], n_boot=n_boot, seed=seed, memo=memo)
                pairs.append({"better": a["model"], "worse": b["model"], **test})
            tables.append({"scope": scope["key"], "evaluator": ev, "measures": measures.get(ev),
                           "higher_is_better": hib, "rows": rows, "pairs": pairs,
                           "missing": [m for m in models if m not in vals]})
    return {"scopes": scopes, "ranked": ranked, "unranked": unranked, "tables": tables, "noop": noop, "test": TEST}


def _per_group(values: list[tuple[str, float, int]]) -> dict[int, float]:
    """Mean score per compare group (an editor with several edits of one source counts it once)."""
    acc: dict[int, list[float]] = {}
    for _, v, g in values:
        acc.setdefault(g, []).append(v)
    return {g: sum(v) / len(v) for g, v in acc.items() if g >= 0}


# ------------------------------------------------------------------------------------------ why nothing ranks

def direction_words(hib: bool | None, measures: str | None) -> str:
    """How a column's direction reads (a similarity is never called better).

    >>> direction_words(True, "quality"), direction_words(False, "similarity")
    ('higher is better', 'lower = closer to the source')
    """
    if hib is None:
        return "direction unknown"
    if measures == "similarity":
        return ("higher" if hib else "lower") + " = closer to the source"
    return ("higher" if hib else "lower") + " is better"


def what_to_add(has_reference: bool, has_captions: bool) -> list[str]:
    """What would let a run rank editors, from the registry's specs (never from names)."""
    from editlens.metrics.registry import list_metrics

    specs = [s for s in list_metrics() if s.measures in RANKED_MEASURES]
    judges = [s.name for s in specs if s.vlm == "required" and not s.pairwise]
    pairwise = [s.name for s in specs if s.pairwise]
    optional = [s.name for s in specs if s.vlm == "optional" and not ({"source_caption", "target_caption"} & set(s.needs))]
    ref = [s.name for s in specs if "reference" in s.needs]
    caps = [s.name for s in specs if {"source_caption", "target_caption"} & set(s.needs) and s.vlm == "none"]
    learned = [s.name for s in specs if s.vlm == "none" and s.model and s.default == "no"
               and not ({"reference", "source_caption", "target_caption"} & set(s.needs))]
    out = []
    if judges:
        out.append(f"a judge of the edit with a vision-language model: --judge {','.join(judges)} --vlm MODEL")
    if optional:
        out.append(f"--metrics {','.join(optional)} with --vlm MODEL (without a VLM "
                   f"{'they give' if len(optional) > 1 else 'it gives'} no verdict)")
    if pairwise:
        out.append(f"a pairwise arena: editlens arena RUN --judge {pairwise[0]} --vlm MODEL (both orders, "
                   "Bradley-Terry ratings)")
    if ref and not has_reference:
        out.append(f"a 'reference' column (each source's reference edit): {', '.join(ref)} then rank by agreement with it")
    if caps and not has_captions:
        out.append(f"captions (a 'target_caption' column, 'source_caption' too for some, or --captions --vlm MODEL): "
                   f"{', '.join(caps)} then rank instruction following (they need a CLIP model)")
    if learned:
        out.append(f"a learned evaluator of edits: --metrics {','.join(learned)} (each needs its model)")
    return out


#: how a status count reads in a reason ("info" rows carry data but no score)
_STATUS_WORDS = {"info": "without a score (info)"}


def why_nothing_ranks(evaluators: Sequence[str], measures: Mapping[str, str | None],
                      status: Mapping[str, Mapping[str, int]], reasons: Mapping[str, str],
                      not_run: Mapping[str, str], has_reference: bool, has_captions: bool) -> dict[str, Any]:
    """Why a run's leaderboard has no ranked table, and what to add: ``{"why": [lines], "add": [lines]}``.

    ``status``: per evaluator its status counts; ``reasons``: its most common
    reason for a result without a score; ``not_run``: evaluators the run skipped,
    with the reason.

    >>> r = why_nothing_ranks(["l1", "dice"], {"l1": "similarity", "dice": "following"},
    ...                       {"l1": {"scored": 8}, "dice": {"skipped": 8}}, {"dice": "no VLM"}, {}, False, False)
    >>> r["why"][0]
    'dice (instruction following) scored no edit (8 skipped); most common reason: no VLM'
    >>> r["why"][1].startswith("l1 measures similarity to the source")
    True
    """
    from editlens.metrics.spec import MEASURES

    why = []
    for ev in evaluators:
        m = measures.get(ev)
        if m in RANKED_MEASURES and not (status.get(ev) or {}).get("scored"):
            counts = ", ".join(f"{n} {_STATUS_WORDS.get(k, k)}" for k, n in sorted((status.get(ev) or {}).items()) if n)
            why.append(f"{ev} ({MEASURES[m]}) scored no edit ({counts or 'no result'})"
                       + (f"; most common reason: {reasons[ev]}" if reasons.get(ev) else ""))
    for ev, reason in not_run.items():
        m = measures.get(ev)
        if m in RANKED_MEASURES:
            why.append(f"{ev} ({MEASURES[m]}) did not run: {reason}")
    similar = [ev for ev in evaluators if measures.get(ev) == "similarity"]
    if similar:
        why.append(f"{', '.join(similar)} measure{'s' if len(similar) == 1 else ''} similarity to the source, where an "
                   "editor that changes nothing scores best: not a ranking")
    if not any(measures.get(ev) in RANKED_MEASURES for ev in list(evaluators) + list(not_run)):
        why.insert(0, "no evaluator of this run judges the edit (edit quality, instruction following or agreement "
                      "with a reference edit)")
    return {"why": why, "add": what_to_add(has_reference, has_captions)}


def specs_of(names: Iterable[str]) -> dict[str, Any]:
    """``{name: MetricSpec or None}``: ``None`` for an evaluator the registry does not know
    (e.g. a plugin no longer installed; its rows are shown, undescribed). A benchmark's judge
    (``bench_gedit``, in a bench run's ``run/``) has its benchmark's spec."""
    from editlens.bench.judge import spec_for_evaluator
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec

    out: dict[str, Any] = {}
    for n in names:
        try:
            out[n] = get_spec(n)
        except UnknownMetricError:
            out[n] = spec_for_evaluator(n)
    return out


def run_ranking_notes(run_dir: Any) -> dict[str, Any]:
    """For ``runs summary``: each evaluator's direction (and what it measures), the similarity
    evaluators (not rankings), and, when no evaluator that judges the edit scored anything,
    :func:`why_nothing_ranks`. Read from the run's store and manifest only (no bootstrap)."""
    from pathlib import Path

    from editlens.reporting.runs import _current_rows, _open

    store = _open(run_dir)
    try:
        rows = _current_rows(store)
        meta = store.get_meta("manifest") or {}
    finally:
        store.close()
    inputs = meta.get("inputs") or {}
    not_run = dict(inputs.get("skipped_metrics") or {})
    evaluators = list(dict.fromkeys(r["evaluator"] for r in rows))
    specs = specs_of(evaluators + [e for e in not_run if e not in evaluators])
    measures = {e: (s.measures if s is not None else None) for e, s in specs.items()}
    status: dict[str, dict[str, int]] = {}
    reasons: dict[str, dict[str, int]] = {}
    for r in rows:
        c = status.setdefault(r["evaluator"], {})
        c[r["status"]] = c.get(r["status"], 0) + 1
        if r["status"] != "scored" and r["reason"]:
            rr = reasons.setdefault(r["evaluator"], {})
            rr[r["reason"]] = rr.get(r["reason"], 0) + 1
    directions = {e: direction_words(bool(s.higher_is_better), s.measures) if s is not None else "direction unknown"
                  for e, s in specs.items() if e in evaluators}
    out: dict[str, Any] = {"directions": directions, "measures": measures,
                           "similarity": [e for e in evaluators if measures.get(e) == "similarity"], "why_empty": None}
    if not any(measures.get(e) in RANKED_MEASURES and status.get(e, {}).get("scored") for e in evaluators):
        has_ref = has_caps = False
        mpath = inputs.get("manifest")
        if mpath and Path(mpath).is_file():
            from editlens.data.manifest import read_manifest

            try:
                samples = read_manifest(mpath, skip_invalid=True, check_files=False).samples
                has_ref = any(s.reference for s in samples)
                has_caps = any(s.target_caption for s in samples)
            except Exception:  # noqa: BLE001 - the notes still say what they can
                pass
        top = {e: max(r.items(), key=lambda kv: kv[1])[0] for e, r in reasons.items()}
        out["why_empty"] = why_nothing_ranks(evaluators, measures, status, top, not_run, has_ref, has_caps)
    return out
