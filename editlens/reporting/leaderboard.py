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
two-sided p-value, significant below 0.05. Everything is cached by content.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from editlens.metrics.spec import RANKED_MEASURES

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
                 n_boot: int = 1000) -> dict[str, Any]:
    """Ranked tables per (scope, evaluator), where a scope is all edits or one category."""
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
            rows = []
            for m, v in vals.items():
                v.sort()
                x = [t[1] for t in v]
                ci = list(cached_bootstrap_ci(x, n_boot=n_boot, seed=seed)) if len(x) >= 2 else None
                rows.append({"model": m, "n": len(x), "mean": sum(x) / len(x), "ci": ci})
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
                test = paired_bootstrap([sign * (ga[g] - gb[g]) for g in shared], n_boot=n_boot, seed=seed)
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
