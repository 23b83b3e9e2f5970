"""``editlens arena``: rank editors from pairwise verdicts on the sources they all edited.

Each *contest* is one source image with one instruction and the edits several
editors made of it. Pairs of those edits are judged by a pairwise judge
(both presentation orders, so a verdict that follows the position becomes a
tie) or by a point-wise evaluator's scores (direction from its spec; the
run's stored scores are reused when the run has them). Verdicts are fitted
with Bradley-Terry (:mod:`editlens.meta.arena`), ties kept.

Pairs are chosen adaptively: a first round pairs the editors of every source
once (a random matching, N/2 pairs per source); then each round fits the
ratings and spends its comparisons on the editor pairs whose order is most
uncertain (close neighbours compared little), on sources where that pair was
not yet judged. It stops when every pair's order is settled (probability of
the wrong order below ``stop_at``), when no unjudged pair is left, or at
``budget`` comparisons. The schedule depends only on the seed and the
verdicts, and every verdict is kept in ``OUT/verdicts.sqlite`` (the cache
layer), so a rerun replays the cached verdicts and asks only what is
missing; a verdict lost to the backend is not kept and is asked again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from editlens.core.io import read_json
from editlens.errors import InputError

SCHEMA = "editlens.arena/1"
#: ratings on the log-strength scale ("bt") or the Elo display scale ("elo")
SCALES = ("bt", "elo")


@dataclass
class Contest:
    """One source (image + instruction) and each editor's edit of it."""

    key: str
    source: str
    instruction: str
    edits: dict[str, str] = field(default_factory=dict)  # editor -> edited image path
    ids: dict[str, str] = field(default_factory=dict)  # editor -> sample id
    reference: str | None = None  # the source's reference edit, for evaluators that compare with one


def is_run_dir(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "results.sqlite").is_file()


def manifest_of(path: str | Path, command: str = "editlens arena") -> tuple[Path, Path | None, dict[str, Any]]:
    """``(manifest, run or None, read options)`` of a run directory (the manifest it recorded, read as the run
    read it: --columns, --split, --edits ...) or of a manifest file."""
    from editlens.data.manifest import read_manifest

    p = Path(path)
    run = None
    read_options: dict[str, Any] = {}
    if is_run_dir(p):
        from editlens.runner.store import ResultsStore

        store = ResultsStore(p)
        try:
            meta = store.get_meta("manifest") or {}
        finally:
            store.close()
        mpath = (meta.get("inputs") or {}).get("manifest")
        if not mpath or not Path(mpath).is_file():
            raise InputError(f"{p}: the run's manifest ({mpath or 'not recorded'}) is not there; pass the manifest "
                             f"itself to `{command}`")
        run, p = Path(path), Path(mpath)
        # the manifest is read as the run read it (--columns, --split, --edits ...), as the report does
        import inspect

        accepted = set(inspect.signature(read_manifest).parameters)
        read_options = {k: v for k, v in ((meta.get("inputs") or {}).get("manifest_options") or {}).items()
                        if k in accepted and v is not None}
    elif not p.is_file():
        raise InputError(f"{p}: neither a run directory (results.sqlite) nor a manifest file")
    return p, run, read_options


def contests_from(path: str | Path, editors: Sequence[str] | None = None) -> tuple[list[Contest], dict[str, Any]]:
    """The contests of a run directory (through its manifest) or of a manifest:
    edits grouped by (source, instruction), keeping sources edited by at least two editors.
    Returns ``(contests, info)`` with ``info``: manifest, run, editors, notes."""
    from editlens.data.manifest import read_manifest

    p, run, read_options = manifest_of(path)
    report = read_manifest(p, check_files=False, **read_options)
    notes: list[str] = []
    by: dict[tuple[str, str], Contest] = {}
    for s in report.samples:
        if s.model is None:
            continue
        if editors and s.model not in editors:
            continue
        src = str(s.source)
        ck = (src, s.instruction)
        if ck not in by:
            digest = hashlib.blake2b(f"{src}\0{s.instruction}".encode(), digest_size=4).hexdigest()
            by[ck] = Contest(f"{Path(src).stem}#{digest}", src, s.instruction)
        c = by[ck]
        if s.model in c.edits:
            notes.append(f"{s.id}: a second edit by {s.model} of the same source and instruction; the first "
                         f"({c.ids[s.model]}) is compared")
            continue
        c.edits[s.model] = str(s.edited)
        c.ids[s.model] = s.id
        if c.reference is None and s.reference is not None:
            c.reference = str(s.reference)
    contests = [c for c in by.values() if len(c.edits) >= 2]
    found = sorted({m for c in contests for m in c.edits})
    if editors:
        unknown = [e for e in editors if e not in found]
        if unknown:
            raise InputError(f"{p}: no source edited by {', '.join(unknown)} and another editor "
                             f"(editors with shared sources: {', '.join(found) or 'none'})")
    if len(found) < 2:
        present = sorted({m for c in by.values() for m in c.edits})
        raise InputError(f"{p}: an arena needs sources edited by at least two editors (the 'model' column); "
                         f"the manifest has {len(present)} editor(s) ({', '.join(present) or 'no model column'}) on "
                         f"{len(by)} source(s), and no source edited by two of them")
    noop = noop_flags(run, contests) if run else {}
    return contests, {"manifest": str(p), "run": str(run) if run else None, "editors": found, "notes": notes,
                      "noop": noop}


def noop_flags(run: Path, contests: Sequence[Contest]) -> dict[str, dict[str, Any]]:
    """Per editor of the contests: how many of its edits a run's ``unchanged_at`` evaluators
    (the change map) checked and found unchanged. An editor all of whose checked edits are
    unchanged is a no-op: flagged and left out of the ranking, as on the report's leaderboard."""
    from editlens.errors import UnknownMetricError
    from editlens.metrics.registry import get_spec
    from editlens.runner.store import ResultsStore

    store = ResultsStore(run)
    try:
        configs = store.current_configs()
        limits = {}
        for ev in configs:
            try:
                limit = get_spec(ev).unchanged_at
            except UnknownMetricError:
                continue
            if limit is not None:
                limits[ev] = limit
        rows = store.rows({ev: configs[ev] for ev in limits}) if limits else []
    finally:
        store.close()
    found: dict[str, list[str]] = {}
    checked: set[str] = set()
    for r in rows:
        if r["status"] == "scored" and r["value"] is not None:
            checked.add(r["sample_id"])
            if r["value"] <= limits[r["evaluator"]]:
                found.setdefault(r["sample_id"], []).append(r["evaluator"])
    out: dict[str, dict[str, Any]] = {}
    for c in contests:
        for m, sid in c.ids.items():
            if sid in checked:
                f = out.setdefault(m, {"checked": 0, "unchanged": 0, "by": set()})
                f["checked"] += 1
                if sid in found:
                    f["unchanged"] += 1
                    f["by"].update(found[sid])
    return {m: {**f, "by": sorted(f["by"]), "noop": f["unchanged"] == f["checked"]} for m, f in out.items()}


# ------------------------------------------------------------------------------------------------ comparers

class StoredScoreComparer:
    """Pairs decided by scores a run already holds (no model call): the evaluator's
    current rows, by sample id; direction from its spec."""

    def __init__(self, run_dir: Path, metric: str, ids_by_edit: Mapping[tuple[str, str, str], str]) -> None:
        from editlens.core.types import Score
        from editlens.metrics.registry import get_spec
        from editlens.runner.store import ResultsStore

        self.spec = get_spec(metric)
        self.name = metric
        store = ResultsStore(run_dir)
        try:
            cfg = store.current_configs().get(metric)
            rows = store.rows({metric: cfg}) if cfg else []
        finally:
            store.close()
        by_id = {r["sample_id"]: Score(metric, r["value"], r["status"], r["reason"], r["details"] or {}) for r in rows}
        self.scores = {k: by_id[sid] for k, sid in ids_by_edit.items() if sid in by_id}
        self.config = cfg

    def identity(self) -> dict[str, Any]:
        return {"stored_scores": self.name, "config": self.config}

    def compare(self, items: Sequence[Any], batch_size: int = 8) -> list[dict[str, Any]]:
        from editlens.core.types import Score
        from editlens.runner.compare import decide

        missing = Score(self.name, None, "skipped", "no stored score for this edit in the run", {})
        out = []
        for it in items:
            sa = self.scores.get((it.source, it.edited_a, it.instruction), missing)
            sb = self.scores.get((it.source, it.edited_b, it.instruction), missing)
            out.append({"id": it.id, **decide(sa, sb, bool(self.spec.higher_is_better), self.name)})
        return out


def identity_of(comparer: Any) -> dict[str, Any]:
    """What makes a comparer's verdicts what they are (the cache key's part)."""
    if hasattr(comparer, "identity"):
        return comparer.identity()
    judge = getattr(comparer, "judge", None)
    if judge is not None:
        return {"judge": comparer.name, "vlm": judge.vlm, "vlm_model": judge.vlm_model, "orders": judge.orders,
                "samples": judge.samples, "temperature": judge.temperature, "seed": judge.seed,
                "max_new_tokens": judge.max_new_tokens,
                "templates": {n: t.sha256 for n, t in judge.templates.items()}}
    metric = getattr(comparer, "metric", None)
    opts = getattr(metric, "options", None)
    return {"metric": comparer.name, "options": opts if isinstance(opts, dict) else None}


# ------------------------------------------------------------------------------------------------ the arena

def _outcome(v: Mapping[str, Any]) -> int | None:
    label = v.get("label")
    return None if label is None else int(label)


@dataclass
class _Judged:
    contest: int
    a: int  # editor index shown as A
    b: int
    verdict: dict[str, Any]


def verdict_cache(out: Path) -> Any:
    """An arena folder's verdict cache (``OUT/verdicts.sqlite``): a rerun asks no verdict again."""
    from editlens.core.cache import SqliteCache

    return SqliteCache(out / "verdicts.sqlite", "verdicts", what="arena verdict cache")


def uncertain_pairs(comparisons: Sequence[tuple[Any, int, int, int]], n: int, ties: str,
                    remaining: Mapping[tuple[int, int], Sequence[Any]],
                    stop_at: float) -> list[tuple[float, int, int, list[tuple[int, int]]]]:
    """The arena's choice of what to compare next: ``(P(order wrong), upper, lower, settling)`` for each pair
    of neighbours in the current order whose order the ``comparisons`` leave uncertain (at least
    ``stop_at``), most uncertain first; ``settling`` lists the editor pairs ``(a, b)`` (``a < b``) with
    something left in ``remaining`` that settle it: the pair itself, then through third editors. Empty:
    every neighbour's order is settled."""
    from editlens.meta.arena import fit, order_uncertainty, pair_counts, settling_pairs, unsettled_neighbours

    w, t = pair_counts(comparisons, n)
    theta = fit(comparisons, n, ties)["theta"]
    return [(p, i, j, settling_pairs(i, j, theta, remaining))
            for p, i, j in unsettled_neighbours(theta, order_uncertainty(w, t, theta), stop_at)]


def allot_round(cands: Sequence[tuple[float, int, int, Sequence[tuple[int, int]]]], allot: int,
                take: Callable[[int, int], Any | None]) -> list[tuple[Any, int, int]]:
    """Spend ``allot`` comparisons over the uncertain neighbours in proportion to their doubt (at least one
    each, most uncertain first), each through its settling pairs in order; ``take(a, b)`` picks the source
    for pair (a, b) (``None``: none left). Returns ``[(source, a, b)]``; empty when nothing left settles
    any of them."""
    total = sum(c[0] for c in cands) or 1.0
    plan: list[tuple[Any, int, int]] = []
    for p, _, _, settling in cands:
        want = max(1, round(allot * p / total))
        for x, y in settling:
            while want > 0 and len(plan) < allot:
                picked = take(x, y)
                if picked is None:
                    break
                plan.append((picked, x, y))
                want -= 1
            if want <= 0 or len(plan) >= allot:
                break
        if len(plan) >= allot:
            break
    return plan


def _check_arena_options(ties: str, budget: int | None, stop_at: float) -> None:
    from editlens.meta.arena import TIES

    if ties not in TIES:
        raise InputError(f"ties must be one of {', '.join(TIES)}, got {ties!r}")
    if budget is not None and budget < 1:
        raise InputError(f"--budget must be at least 1, got {budget}")
    if not 0 < stop_at < 0.5:
        raise InputError(f"--stop-at must be between 0 and 0.5, got {stop_at}")


class _Schedule:
    """An arena's comparisons so far and those left: the pairs of editors each
    source can still compare, the verdicts (cached in ``OUT/verdicts.sqlite``)
    and how often each source was used."""

    def __init__(self, contests: Sequence[Contest], comparer: Any, out: Path, seed: int, batch_size: int) -> None:
        self.contests, self.comparer, self.batch_size = contests, comparer, batch_size
        self.editors = sorted({m for c in contests for m in c.edits})
        self.idx = {m: i for i, m in enumerate(self.editors)}
        self.cache = verdict_cache(out)
        self.ident = identity_of(comparer)
        self.rng = np.random.default_rng(seed)
        self.remaining: dict[tuple[int, int], list[int]] = {}
        for ci, c in enumerate(contests):
            present = sorted(self.idx[m] for m in c.edits)
            for x in range(len(present)):
                for y in range(x + 1, len(present)):
                    self.remaining.setdefault((present[x], present[y]), []).append(ci)
        self.all_pairs = sum(len(v) for v in self.remaining.values())
        self.judged: list[_Judged] = []
        self.used = np.zeros(len(contests), dtype=int)
        self.stats = {"asked": 0, "cached": 0}

    def _item(self, ci: int, i: int, j: int) -> tuple[int, int, Any, str]:
        """Editor shown as A, as B, the pair to judge and its cache key."""
        from editlens.core.cache import key_of
        from editlens.runner.compare import PairItem

        c, editors = self.contests[ci], self.editors
        # which editor is shown as A: fixed by the contest and the pair, not by the schedule
        flip = hashlib.blake2b(f"{c.key}\0{editors[i]}\0{editors[j]}".encode(), digest_size=1).digest()[0] & 1
        a, b = (j, i) if flip else (i, j)
        item = PairItem(f"{c.key}|{editors[a]}|{editors[b]}", c.source, c.edits[editors[a]],
                        c.edits[editors[b]], c.instruction, c.reference)
        # (the reference is part of the key only where there is one: earlier caches stay valid)
        key = key_of(self.ident, c.source, c.edits[editors[a]], c.edits[editors[b]], c.instruction,
                     *([c.reference] if c.reference is not None else []))
        return a, b, item, key

    def judge(self, plan: list[tuple[int, int, int]]) -> None:
        """Verdicts on ``(source, editor i, editor j)``: cached ones replayed, the rest asked in batches
        (a verdict lost to the backend is not cached: a rerun asks it again)."""
        items = [(ci, *self._item(ci, i, j)) for ci, i, j in plan]
        keys = [key for *_, key in items]
        got = self.cache.get_many(keys) if keys else {}
        todo = [k for k, key in enumerate(keys) if key not in got]
        self.stats["cached"] += len(keys) - len(todo)
        self.stats["asked"] += len(todo)
        for s in range(0, len(todo), self.batch_size):
            chunk = todo[s : s + self.batch_size]
            verdicts = self.comparer.compare([items[k][3] for k in chunk], self.batch_size)
            keep = []
            for k, v in zip(chunk, verdicts):
                got[keys[k]] = v
                if not v.get("failed"):
                    keep.append((keys[k], v))
            self.cache.put_many(keep)
        for ci, a, b, _, key in items:
            self.judged.append(_Judged(ci, a, b, got[key]))
            self.used[ci] += 1

    def comparisons(self) -> list[tuple[Any, int, int, int]]:
        return [(j.contest, j.a, j.b, o) for j in self.judged if (o := _outcome(j.verdict)) is not None]

    def take(self, i: int, j: int) -> int | None:
        """A source where editors ``i`` and ``j`` are not compared yet, among the least used; ``None``: none left."""
        pool = self.remaining.get((i, j)) or []
        if not pool:
            return None
        least = min(self.used[c] for c in pool)
        choices = [c for c in pool if self.used[c] == least]
        ci = choices[int(self.rng.integers(0, len(choices)))]
        pool.remove(ci)
        return ci

    def first_round(self, budget: int | None) -> None:
        """Every source's editors paired once (a random matching); a random sample of it within ``budget``."""
        plan = []
        for ci, c in enumerate(self.contests):
            present = [self.idx[m] for m in c.edits]
            order = [present[k] for k in self.rng.permutation(len(present))]
            for x in range(0, len(order) - 1, 2):
                i, j = sorted((order[x], order[x + 1]))
                plan.append((ci, i, j))
        if budget is not None and budget < len(plan):  # a random sample of the first round, by the seed
            plan = [plan[k] for k in sorted(self.rng.choice(len(plan), size=budget, replace=False))]
        for ci, i, j in plan:
            self.remaining[(i, j)].remove(ci)
        self.judge(plan)

    def next_rounds(self, ties: str, budget: int | None, size: int, stop_at: float,
                    progress: Callable[[str], None] | None) -> tuple[int, str]:
        """Rounds on the most uncertain neighbours until settled, out of pairs or of budget:
        the number of rounds (the first included) and why it stopped."""
        rounds, n = 1, len(self.editors)
        while True:
            if budget is not None and len(self.judged) >= budget:
                return rounds, "budget"
            cands = uncertain_pairs(self.comparisons(), n, ties, self.remaining, stop_at)
            if not cands:
                return rounds, "settled"
            allot = size if budget is None else min(size, budget - len(self.judged))
            plan = allot_round(cands, allot, self.take)
            if not plan:  # the open pairs cannot be compared any more, directly or through a third editor
                return rounds, "exhausted"
            self.judge(plan)
            rounds += 1
            if progress:
                progress(f"round {rounds}: {len(self.judged)} comparisons ({self.stats['asked']} asked, "
                         f"{self.stats['cached']} cached); {len(cands)} neighbour pair(s) not settled yet")

    def unsettled(self, ties: str, stop_at: float) -> list[dict[str, Any]]:
        """Neighbours whose order the final verdicts leave uncertain (``unlinked``: no verdict links them)."""
        from editlens.meta.arena import fit, identifiability, order_uncertainty, pair_counts, unsettled_neighbours

        final, n, editors = self.comparisons(), len(self.editors), self.editors
        if not final:  # nothing judged with a verdict: no order to be settled
            return []
        w, t = pair_counts(final, n)
        theta = fit(final, n, ties)["theta"]
        comp = identifiability(final, n)["component_of"]
        return [{"better": editors[i], "worse": editors[j], "p_wrong": round(p, 4),
                 **({"unlinked": True} if comp[i] != comp[j] else {})}  # no verdict links them: no order at all
                for p, i, j in unsettled_neighbours(theta, order_uncertainty(w, t, theta), stop_at)]


def run_arena(contests: Sequence[Contest], comparer: Any, out_dir: str | Path, *, ties: str = "davidson",
              budget: int | None = None, round_size: int | None = None, stop_at: float = 0.01, seed: int = 0,
              n_boot: int = 200, batch_size: int = 8, human: Mapping[str, float] | None = None,
              info: Mapping[str, Any] | None = None,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Judge pairs adaptively, fit the ratings and write ``out_dir/arena.json`` and
    ``out_dir/comparisons.jsonl`` (atomically). Returns the arena document (see
    :func:`editlens.runner.arena` module docstring and :func:`ratings_document`)."""
    _check_arena_options(ties, budget, stop_at)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sched = _Schedule(contests, comparer, out, seed, batch_size)
    editors, judged = sched.editors, sched.judged
    size = round_size or max(len(editors), len(contests) // 2)
    try:
        sched.first_round(budget)
        rounds, stopped = sched.next_rounds(ties, budget, size, stop_at, progress)
    finally:
        sched.cache.close()  # every verdict is already written: closing loses nothing
    doc = ratings_document(editors, contests, judged, ties=ties, n_boot=n_boot, seed=seed, human=human,
                           noop=(info or {}).get("noop"))
    still = sched.unsettled(ties, stop_at)
    doc.update({
        "judge": getattr(comparer, "name", type(comparer).__name__), "judge_identity": sched.ident,
        "input": dict(info or {}),
        "schedule": {"rounds": rounds, "stopped": stopped, "settled": bool(sched.comparisons()) and not still,
                     "unsettled": still, "stop_at": stop_at, "budget": budget, "round_size": size,
                     "seed": seed, "comparisons": len(judged),
                     "all_pairs": len(judged) + sum(len(v) for v in sched.remaining.values()),
                     "asked": sched.stats["asked"], "cached": sched.stats["cached"]},
    })
    assert doc["schedule"]["all_pairs"] == sched.all_pairs
    write_outputs(doc, judged, contests, editors, out)
    return doc


def _names(editors: Sequence[str], idx: Sequence[int]) -> str:
    return ", ".join(editors[i] for i in idx)


@dataclass
class _Fit:
    """The Bradley-Terry fit behind a ratings document, and the facts about it every part of the document reads."""

    editors: Sequence[str]
    boot: dict[str, Any]  # :func:`editlens.meta.arena.bootstrap_ratings`
    theta: np.ndarray  # ratings, rounded
    rank: np.ndarray  # 0: not ranked
    is_noop: np.ndarray
    comps: list[tuple[Any, int, int, int]]  # the comparisons with a verdict

    @property
    def ident(self) -> dict[str, Any]:
        return self.boot["identifiability"]

    @property
    def groups(self) -> list[list[int]]:
        return self.ident["components"]

    @property
    def rated(self) -> bool:
        return bool(self.comps)

    @property
    def several(self) -> bool:
        """The verdicts fall into more than one group of linked editors."""
        return len([g for g in self.groups if any(self.ident["sources"][i] for i in g)]) > 1

    def group_of(self, i: int) -> int:
        return next(gi + 1 for gi, g in enumerate(self.groups) if i in g)


def _fit(editors: Sequence[str], judged: Sequence[_Judged], ties: str, n_boot: int, seed: int,
         noop: Mapping[str, Mapping[str, Any]]) -> _Fit:
    """Fits the ratings with their bootstrap and ranks the editors within each group of linked editors
    (an editor that changed nothing is never ranked)."""
    from scipy.stats import rankdata

    from editlens.meta.arena import bootstrap_ratings

    n = len(editors)
    comps = [(j.contest, j.a, j.b, o) for j in judged if (o := _outcome(j.verdict)) is not None]
    is_noop = np.array([bool((noop.get(m) or {}).get("noop")) for m in editors])
    boot = bootstrap_ratings(comps, n, ties=ties, n_boot=n_boot, seed=seed, ranked=list(~is_noop))
    ident = boot["identifiability"]
    theta = np.round(np.nan_to_num(boot["theta"]), 6) + 0.0
    rank = np.zeros(n, dtype=int)
    if comps and ident["decided"] > 0:
        for g in ident["components"]:
            members = [i for i in g if not is_noop[i] and ident["sources"][i]]
            if members:
                rank[members] = rankdata(-theta[members], method="min").astype(int)
    return _Fit(editors, boot, theta, rank, is_noop, comps)


def _tally(editors: Sequence[str], judged: Sequence[_Judged]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Per editor wins, losses, ties and comparisons without a verdict; and over all
    verdicts: ties from position bias, verdicts lost to the backend, no verdict."""
    record = {m: {"wins": 0, "losses": 0, "ties": 0, "no_verdict": 0} for m in editors}
    counts = {"position_bias": 0, "failed": 0, "no_verdict": 0}
    for j in judged:
        o = _outcome(j.verdict)
        a, b = editors[j.a], editors[j.b]
        if o is None:
            counts["no_verdict"] += 1
            counts["failed"] += bool(j.verdict.get("failed"))
            record[a]["no_verdict"] += 1
            record[b]["no_verdict"] += 1
        elif o == 0:
            record[a]["ties"] += 1
            record[b]["ties"] += 1
            counts["position_bias"] += bool(j.verdict.get("position_bias"))
        else:
            win, lose = (a, b) if o > 0 else (b, a)
            record[win]["wins"] += 1
            record[lose]["losses"] += 1
    return record, counts


def _editor_rows(fit: _Fit, record: Mapping[str, Mapping[str, int]],
                 noop: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per editor, ranked ones first (by group, then rating): what it can be given and why not the rest."""
    from editlens.meta.arena import elo_scale

    boot, ident, theta, rank, several = fit.boot, fit.ident, fit.theta, fit.rank, fit.several
    separated = {i for blocks in ident["separated"] for g in blocks for i in g}
    rows = []
    for i in sorted(range(len(fit.editors)),
                    key=lambda k: (fit.group_of(k) if several else 0, bool(fit.is_noop[k]) or not rank[k], -theta[k])):
        m = fit.editors[i]
        f = noop.get(m) or {}
        estimable = fit.rated and ident["sources"][i] > 0 and i not in separated
        why = (None if estimable else
               "no verdict" if not fit.rated or not ident["sources"][i] else
               "not identifiable: separation (see the notes)")
        if boot["too_few"][i] and ident["sources"][i]:
            why = ((why + "; ") if why else "") + f"too few sources ({ident['sources'][i]}) for a CI"
        ci = boot["ci"][i] if estimable else None
        rows.append({"editor": m, "rank": int(rank[i]) if rank[i] else None,
                     "rank_ci": boot["rank_ci"][i] if rank[i] else None,
                     "group": fit.group_of(i) if several else None,
                     "rating": float(theta[i]) if estimable else None, "rating_note": why,
                     "noop": f"{f['unchanged']}/{f['checked']} edits unchanged" if f.get("unchanged") else None,
                     "ci": ci, "elo": float(elo_scale([theta[i]])[0]) if estimable else None,
                     "elo_ci": elo_scale(ci).tolist() if ci else None, "sources": ident["sources"][i], **record[m],
                     "comparisons": record[m]["wins"] + record[m]["losses"] + record[m]["ties"]})
    return rows


def _neighbours(fit: _Fit, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each ranked editor and the next of its group: the bootstrap's probability that the first is better."""
    neighbours = []
    ranked = [r for r in rows if r["rank"] is not None]
    for up, down in zip(ranked, ranked[1:]):
        if up["group"] != down["group"]:
            continue  # editors of different groups have no order
        pb = fit.boot["p_better"][fit.editors.index(up["editor"])][fit.editors.index(down["editor"])]
        neighbours.append({"better": up["editor"], "worse": down["editor"], "p_better": pb,
                           "significant": pb is not None and pb >= 0.975,
                           **({"why": "too few sources"} if pb is None else {})})
    return neighbours


def _verdict_notes(fit: _Fit, counts: Mapping[str, int], ties: str) -> list[str]:
    """What the verdicts as a whole allow: all ties, none, position bias, the tie parameter."""
    comps, position_bias = fit.comps, counts["position_bias"]
    decided = sum(1 for c in comps if c[3] != 0)
    notes = []
    if comps and decided == 0:
        notes.append(f"every verdict was a tie ({len(comps) - decided}, {position_bias} of them position bias: the "
                     "judge's preference followed the order of the pictures, not the pictures): the ratings are equal "
                     "and do not order the editors; no rank is given")
    elif not comps:
        failed = counts["failed"]
        notes.append("no comparison gave a verdict: nothing to rate" + (f" ({failed} lost to the backend)" if failed
                                                                        else ""))
    elif position_bias:
        notes.append(f"{position_bias} of {len(comps)} verdicts were ties because the two presentation orders "
                     "disagreed (position bias)")
    return notes


def _identifiability_notes(fit: _Fit) -> list[str]:
    """What the verdicts cannot order: unconnected groups, separated groups, editors with too few sources."""
    editors, ident, boot = fit.editors, fit.ident, fit.boot
    notes = []
    if fit.rated and fit.several:
        named = "; ".join(f"group {gi + 1}: {_names(editors, g)}" for gi, g in enumerate(fit.groups)
                          if any(ident["sources"][i] for i in g))
        notes.append(f"the comparisons fall into unconnected groups ({named}): no verdict links the groups, directly "
                     "or through other editors, so editors are ranked within their group only and ratings of "
                     "different groups are not comparable")
    index_of = {tuple(g): b for b, g in enumerate(ident["blocks"])}
    for blocks in ident["separated"]:
        blocks = sorted(blocks, key=lambda g: -float(np.mean(fit.theta[g])))
        ids = [index_of[tuple(g)] for g in blocks]
        chain = all(low in ident["above"][up] for up, low in zip(ids, ids[1:]))  # each one directly above the next
        shown = (" > " if chain else ", ").join("{" + _names(editors, g) + "}" for g in blocks)
        how = ("each group won every comparison with the next (never lost to it, nor tied)" if chain else
               "highest rated first; between any two of these groups that were compared, every verdict went "
               "the same way")
        notes.append(f"separation: {shown}: {how}, so the gaps between the groups are not estimable (the "
                     "maximum-likelihood ratings are infinite; any finite number would be the prior's): no rating, "
                     f"CI or Elo is given for {_names(editors, sorted(i for g in blocks for i in g))}; their order "
                     "is the verdicts'")
    few = [i for i in range(len(editors)) if boot["too_few"][i] and ident["sources"][i]]
    if few:
        notes.append("too few sources: " + ", ".join(f"{editors[i]} ({ident['sources'][i]})" for i in few)
                     + f" had verdicts on fewer than {boot['min_sources']} sources: no CI, rank CI or share of "
                     "resamples is given for them")
    return notes


def _human_agreement(fit: _Fit, rows: Sequence[Mapping[str, Any]], human: Mapping[str, float]) -> dict[str, Any]:
    """How the arena's ranks agree with a human ranking (none across unconnected groups)."""
    from editlens.meta.arena import rank_agreement

    ranked_rows = [r for r in rows if r["rank"] is not None]
    agree = rank_agreement({r["editor"]: -float(r["rank"]) for r in ranked_rows}, human)
    unknown = sorted(set(human) - set(fit.editors))
    if fit.several and agree["kendall"] is not None:
        agree = {**agree, "kendall": None, "spearman": None,
                 "why": "the arena's editors fall into unconnected groups: there is no one ranking to compare"}
    return {**agree, "reference": dict(human), "not_in_arena": unknown,
            "not_in_human": sorted(r["editor"] for r in ranked_rows if r["editor"] not in human)}


def ratings_document(editors: Sequence[str], contests: Sequence[Contest], judged: Sequence[_Judged], *, ties: str,
                     n_boot: int, seed: int, human: Mapping[str, float] | None = None,
                     noop: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The ratings of ``judged`` comparisons: per editor rating (log-strength) with
    bootstrap CI over sources, Elo display, rank and its CI, wins/losses/ties;
    neighbours' probability of being better; the tie and position-bias counts.

    What the verdicts cannot support is a statement, never a number (see
    :func:`editlens.meta.arena.bootstrap_ratings`): editors of unconnected groups
    are ranked within their group only (``group``; the groups are named in the
    notes); a separated editor (its group won or lost every comparison with
    another) has no rating, CI or Elo (``rating_note`` says why); an editor with
    verdicts on too few sources has no CI, rank CI or share of resamples; when every
    verdict is a tie nothing is ranked; with no verdict nothing is rated."""
    from editlens.meta.arena import TIES

    noop = noop or {}
    fit = _fit(editors, judged, ties, n_boot, seed, noop)
    boot, ident = fit.boot, fit.ident
    record, counts = _tally(editors, judged)
    rows = _editor_rows(fit, record, noop)
    decided = sum(1 for c in fit.comps if c[3] != 0)
    notes = _verdict_notes(fit, counts, ties) + _identifiability_notes(fit)
    if ties == "davidson" and boot["nu"] is None and fit.comps:
        notes.append("Davidson's tie parameter nu is not fitted: " + ("every verdict was a tie" if not decided
                                                                      else "no verdict was a tie"))
    for m, f in noop.items():
        if f.get("noop"):
            notes.append(f"{m}: all {f['checked']} checked edits unchanged (by {', '.join(f['by'])}): a no-op, rated "
                         "but not ranked (an editor that changes nothing must not win)")
    doc: dict[str, Any] = {
        "schema": SCHEMA, "ties": ties, "ties_model": TIES[ties],
        "tie_parameter": boot["nu"], "scale": {"rating": "log-strength (Bradley-Terry), centred on 0",
                                               "elo": "Elo display: 1000 + 400 * rating / ln 10"},
        "ci": f"{int(boot['level'] * 100)}% percentile bootstrap over sources ({n_boot} resamples, seed {seed})",
        "editors": rows, "neighbours": _neighbours(fit, rows),
        "groups": [[editors[i] for i in g] for g in fit.groups if any(ident["sources"][i] for i in g)],
        "ordered": fit.rated and ident["decided"] > 0,
        "verdicts": {"comparisons": len(judged), "decided": decided, "ties": len(fit.comps) - decided,
                     "position_bias": counts["position_bias"], "no_verdict": counts["no_verdict"],
                     "failed": counts["failed"]},
        "sources": len(contests), "notes": notes,
    }
    if human:
        doc["human"] = _human_agreement(fit, rows, human)
    return doc


def write_outputs(doc: Mapping[str, Any], judged: Sequence[_Judged], contests: Sequence[Contest],
                  editors: Sequence[str], out: Path) -> None:
    from editlens.core.io import atomic_write

    lines = []
    for j in judged:
        c = contests[j.contest]
        v = {k: val for k, val in j.verdict.items() if k != "id"}  # raw answers kept (an unparsable one above all)
        lines.append(json.dumps({"source": c.key, "a": editors[j.a], "b": editors[j.b], "id_a": c.ids[editors[j.a]],
                                 "id_b": c.ids[editors[j.b]], **v}, default=str) + "\n")
    atomic_write(out / "comparisons.jsonl", lambda fh: fh.writelines(lines))
    atomic_write(out / "arena.json", lambda fh: json.dump(doc, fh, indent=1, default=str))


def read_human_ranking(path: str | Path) -> dict[str, float]:
    """A human ranking of editors: JSON ``{editor: score}`` (higher = better, finite
    numbers) or a JSON list of editors, best first. An editor named twice, a score
    that is not a finite number, or fewer than two editors is refused, naming the file."""
    import math

    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: human ranking not found")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen = [k for k, _ in pairs]
        twice = sorted({k for k in seen if seen.count(k) > 1})
        if twice:
            raise InputError(f"{p}: editor {', '.join(twice)} named twice in the human ranking")
        return dict(pairs)

    try:
        doc = json.loads(p.read_text(encoding="utf-8"), object_pairs_hook=no_duplicates,
                         parse_constant=lambda c: c)  # NaN / Infinity kept as text: refused below, by name
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{p}: not JSON ({exc}); give {{editor: score}} or a list of editors, best first") from exc
    if isinstance(doc, list) and all(isinstance(x, str) for x in doc):
        twice = sorted({m for m in doc if doc.count(m) > 1})
        if twice:
            raise InputError(f"{p}: editor {', '.join(twice)} listed twice in the human ranking")
        out = {m: float(len(doc) - k) for k, m in enumerate(doc)}
    elif isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(f"{p}: the human score of {k!r} is {v!r}; every score must be a finite number "
                                 "(higher = better)")
            out[str(k)] = float(v)
    else:
        raise InputError(f"{p}: give {{editor: score}} (higher = better) or a list of editors, best first")
    if len(out) < 2:
        raise InputError(f"{p}: a human ranking needs at least two editors, found {len(out)}")
    return out


def load_arena(path: str | Path) -> dict[str, Any] | None:
    """An arena's ``arena.json`` (a file, or a folder holding one); ``None`` when absent."""
    p = Path(path)
    p = p / "arena.json" if p.is_dir() else p
    if not p.is_file():
        return None
    doc = read_json(p, "arena result")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise InputError(f"{p}: not an editlens arena result (schema {SCHEMA})")
    return doc
