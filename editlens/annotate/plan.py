"""What people label and who labels what.

*Items*: point-wise, one per edit of the run or manifest; pairwise, one per
pair of edits of the same source by two editors (the arena's contests: the
same source image and instruction), in a fixed orientation (a, b) drawn
from a hash of the pair. Where the manifest has sessions (columns ``session`` and ``turn``, or
MagicBrush's ``img_id`` and ``turn_index``), an item of turn t carries the
session's earlier turns, shown turn by turn above it, and pairs are formed
per (session, turn): each editor's output of that turn.

*Plan*: each item is given to ``overlap`` (k) annotators, balanced
(each item goes to the k least loaded annotators, ties drawn), each annotator's list
shuffled; ``repeats`` of an annotator's items come back later in their list
(pairs with left and right swapped); every ``gold`` item (an answer known in
advance) is put in every list. Left and right of each pair are drawn per
position and recorded. Everything is drawn from ``seed``, recorded with the
plan.

*Adaptive pairs* (``adaptive``): the regular positions of a list are left open
and filled when the annotator reaches them, by the arena's scheduler
(:func:`editlens.runner.arena.uncertain_pairs`): the editor pair whose order
the votes so far leave most uncertain, on the source where that pair was
compared least and that this annotator has not judged yet.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.annotate.presets import PAIR_OUTCOMES, check_scores
from editlens.errors import InputError

SESSION_COLUMNS = (("session", "turn"), ("img_id", "turn_index"))


def _session(meta: Mapping[str, Any]) -> tuple[str, int] | None:
    for s, t in SESSION_COLUMNS:
        if meta.get(s) not in (None, "") and meta.get(t) not in (None, ""):
            try:
                return str(meta[s]), int(meta[t])
            except (TypeError, ValueError):
                raise InputError(f"column {t!r} must be a whole number, got {meta[t]!r}") from None
    return None


def read_edits(run_or_manifest: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every edit of a run directory (its manifest, as the run read it) or a manifest, as plain dicts:
    ``id, source, edited, instruction, model, session, turn``."""
    from editlens.data.manifest import read_manifest
    from editlens.runner.arena import manifest_of

    manifest, run, options = manifest_of(run_or_manifest, "editlens annotate")
    report = read_manifest(manifest, check_files=False, **options)
    edits = []
    for s in report.samples:
        sess = _session(s.metadata)
        edits.append({"id": s.id, "source": str(s.source), "edited": str(s.edited), "instruction": s.instruction,
                      "model": s.model, "session": sess[0] if sess else None, "turn": sess[1] if sess else None})
    if not edits:
        raise InputError(f"{manifest}: no edit to label")
    return edits, {"manifest": str(manifest), "run": str(run) if run else None}


def _history(edits: Sequence[Mapping[str, Any]], e: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The earlier turns of ``e``'s session by the same editor, first turn first."""
    if e["session"] is None:
        return []
    return [{"turn": o["turn"], "instruction": o["instruction"], "source": o["source"], "edited": o["edited"]}
            for o in sorted(edits, key=lambda x: x["turn"])
            if o["session"] == e["session"] and o["model"] == e["model"] and o["turn"] < e["turn"]]


def pointwise_items(edits: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": e["id"], "task": "pointwise", "source": e["source"], "edited": e["edited"],
             "instruction": e["instruction"], "model": e["model"], "session": e["session"], "turn": e["turn"],
             "history": _history(edits, e)} for e in edits]


def pairwise_items(edits: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pairs of edits of the same source (or session turn) by two editors, in an orientation (a, b) drawn
    from a hash of the pair."""
    groups: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for e in edits:
        if e["model"] is None:
            continue
        key = (e["session"], e["turn"]) if e["session"] is not None else (e["source"], e["instruction"])
        groups.setdefault(key, {}).setdefault(e["model"], e)  # a second edit by one editor: the first is kept
    items = []
    for key, by_editor in groups.items():
        names = sorted(by_editor)
        digest = hashlib.blake2b("\0".join(map(str, key)).encode(), digest_size=4).hexdigest()
        first = by_editor[names[0]]
        group = f"{first['session']}#t{first['turn']}" if first["session"] is not None else \
            f"{Path(first['source']).stem}#{digest}"
        for x in range(len(names)):
            for y in range(x + 1, len(names)):
                a, b = by_editor[names[x]], by_editor[names[y]]
                # which edit is A: fixed by the pair (a hash), not by the names, so A is no proxy for an editor
                if hashlib.blake2b(f"{group}\0{names[x]}\0{names[y]}".encode(), digest_size=1).digest()[0] & 1:
                    a, b = b, a
                ha, hb = _history(edits, a), _history(edits, b)
                items.append({
                    "id": f"{group}|{a['model']}|{b['model']}", "task": "pairwise", "group": group,
                    # a later turn: each editor edited its own last output; the session's first source is shown
                    "source": ha[0]["source"] if ha else a["source"], "instruction": a["instruction"], "session": a["session"], "turn": a["turn"],
                    "a": {"id": a["id"], "editor": a["model"], "edited": a["edited"], "source": a["source"]},
                    "b": {"id": b["id"], "editor": b["model"], "edited": b["edited"], "source": b["source"]},
                    "history": [{"turn": p["turn"], "instruction": p["instruction"], "a": p["edited"], "b": q["edited"]}
                                for p, q in zip(ha, hb) if p["turn"] == q["turn"]]})
    if not items:
        raise InputError("no source was edited by two editors (the 'model' column): a pairwise task needs pairs")
    return items


def read_gold(path: str | Path, task: str, items: Mapping[str, Mapping[str, Any]],
              preset: Mapping[str, Any] | None) -> dict[str, Any]:
    """Known answers by item id. Pairwise lines ``{"a", "b", "preference": A|B|tie|both_bad}`` (sample ids,
    either order); point-wise lines ``{"id", "scores": {criterion: value}}``."""
    from editlens.data.jsonl import iter_jsonl

    by_pair = {frozenset((it["a"]["id"], it["b"]["id"])): it for it in items.values() if task == "pairwise"}
    gold: dict[str, Any] = {}
    for n, row in iter_jsonl(path):
        where = f"{path}:{n}"
        if task == "pairwise":
            if "a" not in row or "b" not in row or "preference" not in row:
                raise InputError(f"{where}: a pairwise gold line needs 'a', 'b' (edit ids) and 'preference'")
            it = by_pair.get(frozenset((str(row["a"]), str(row["b"]))))
            if it is None:
                raise InputError(f"{where}: {row['a']!r} and {row['b']!r} are not a pair of this task (two "
                                 "editors' edits of one source)")
            pref = str(row["preference"])
            if pref not in PAIR_OUTCOMES:
                raise InputError(f"{where}: preference {pref!r} is not one of {', '.join(PAIR_OUTCOMES)}")
            if str(row["a"]) != it["a"]["id"]:  # given in the other order
                pref = {"A": "B", "B": "A"}.get(pref, pref)
            gold[it["id"]] = {"choice": pref}
        else:
            if str(row.get("id")) not in items:
                raise InputError(f"{where}: id {row.get('id')!r} is not an edit of this task")
            try:
                gold[str(row["id"])] = {"scores": check_scores(preset or {}, row.get("scores"))}
            except InputError as exc:
                raise InputError(f"{where}: {exc}") from None
    if not gold:
        raise InputError(f"{path}: no gold item")
    return gold


def _flip(rng: random.Random, it: Mapping[str, Any]) -> str | None:
    """The edit shown on the left of a pair (its sample id), drawn; ``None`` for a point-wise item."""
    if it["task"] != "pairwise":
        return None
    return it["a"]["id"] if rng.random() < 0.5 else it["b"]["id"]


def make_plan(items: Sequence[Mapping[str, Any]], annotators: Sequence[str], *, overlap: int, seed: int,
              repeats: int = 0, gold: Sequence[str] = (), adaptive: int | None = None
              ) -> list[tuple[str, int, str | None, str, str | None, int | None]]:
    """Rows ``(annotator, position, item, kind, left, repeat_of)`` of the plan (see the module docstring).
    ``adaptive``: the number of open pair positions per annotator (filled as they are reached)."""
    if not annotators:
        raise InputError("no annotator: give --annotators NAMES or a count")
    if not 1 <= overlap <= len(annotators):
        raise InputError(f"--overlap {overlap}: each item is seen by k annotators, 1 <= k <= {len(annotators)} "
                         "(the annotators)")
    rng = random.Random(seed)
    regular = [it for it in items if it["id"] not in set(gold)]
    by_id = {it["id"]: it for it in items}
    lists: dict[str, list[str | None]] = {a: [] for a in annotators}
    if adaptive is None:
        order = list(regular)
        rng.shuffle(order)
        load = {a: 0 for a in annotators}
        for it in order:  # the k least loaded annotators, ties drawn: balanced, and every pair of people overlaps
            for a in sorted(annotators, key=lambda x: (load[x], rng.random()))[:overlap]:
                lists[a].append(it["id"])
                load[a] += 1
    else:
        for a in annotators:
            lists[a] = [None] * adaptive
    rows: list[tuple[str, int, str | None, str, str | None, int | None]] = []
    for a in annotators:
        own = lists[a]
        rng.shuffle(own)
        seq: list[tuple[str | None, str]] = [(i, "item") for i in own]
        for g in gold:
            seq.insert(rng.randint(0, len(seq)), (g, "gold"))
        firsts = [k for k, (_, kind) in enumerate(seq) if kind == "item"]
        # a repeat comes back at least 4 positions after its first showing (when the list is long enough)
        early = [k for k in firsts if k + 4 <= len(seq)] or firsts
        chosen = sorted(rng.sample(early, min(repeats, len(early))))
        buckets: dict[int, list[int]] = {}
        for c in chosen:
            buckets.setdefault(rng.randint(min(c + 4, len(seq)), len(seq)), []).append(c)
        pos_of: dict[int, int] = {}
        left_of: dict[int, str | None] = {}
        position = 0
        for k in range(len(seq) + 1):
            for c in buckets.get(k, []):
                iid = seq[c][0]
                first_left = left_of[c]
                left = None
                if iid is not None and first_left is not None:
                    it = by_id[iid]  # a pair comes back with its sides swapped
                    left = it["b"]["id"] if first_left == it["a"]["id"] else it["a"]["id"]
                rows.append((a, position, iid, "repeat", left, pos_of[c]))
                position += 1
            if k < len(seq):
                iid, kind = seq[k]
                left_of[k] = _flip(rng, by_id[iid]) if iid is not None else None
                pos_of[k] = position
                rows.append((a, position, iid, kind, left_of[k], None))
                position += 1
    return rows


def plan_record(items: Sequence[Mapping[str, Any]], rows: Sequence[tuple], settings: Mapping[str, Any]) -> dict:
    """What the plan was made from, for ``DIR/plan.json``."""
    per: dict[str, dict[str, int]] = {}
    for a, _, _, kind, _, _ in rows:
        per.setdefault(a, {"item": 0, "repeat": 0, "gold": 0})[kind] += 1
    return {"settings": dict(settings), "items": len(items), "per_annotator": per}


def write_plan_file(folder: Path, record: Mapping[str, Any]) -> None:
    from editlens.core.io import atomic_write

    atomic_write(folder / "plan.json", lambda fh: json.dump(record, fh, indent=1))


# ------------------------------------------------------------------------------------------ adaptive pairs

def editors_of(items: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted({it[s]["editor"] for it in items.values() if it["task"] == "pairwise" for s in ("a", "b")})


def vote_outcome(item: Mapping[str, Any], answer: Mapping[str, Any]) -> int | None:
    """+1 (a better), -1 (b better), 0 (tie or both bad) of a pairwise vote; ``None`` for anything else."""
    return {"A": 1, "B": -1, "tie": 0, "both_bad": 0}.get(str(answer.get("choice")))


def comparisons_of(items: Mapping[str, Mapping[str, Any]], votes: Sequence[Mapping[str, Any]],
                   editors: Sequence[str], kinds: Sequence[str] = ("item",)) -> list[tuple[str, int, int, int]]:
    """``(group, editor a, editor b, outcome)`` of the pairwise votes (the arena's comparisons)."""
    idx = {m: i for i, m in enumerate(editors)}
    out = []
    for v in votes:
        it = items.get(v["item"])
        if it is None or it["task"] != "pairwise" or v["kind"] not in kinds:
            continue
        o = vote_outcome(it, v["answer"])
        if o is not None:
            out.append((it["group"], idx[it["a"]["editor"]], idx[it["b"]["editor"]], o))
    return out


def next_adaptive_pair(items: Mapping[str, Mapping[str, Any]], votes: Sequence[Mapping[str, Any]],
                       seen: set[str], rng: random.Random, ties: str = "davidson", stop_at: float = 0.0,
                       shown: Mapping[str, int] | None = None) -> str | None:
    """The next pair for an annotator who has judged (or been shown) the items ``seen``: the arena's most
    uncertain editor pair, on the source where it was shown least. ``None``: nothing left to show."""
    from editlens.runner.arena import allot_round, uncertain_pairs

    editors = editors_of(items)
    idx = {m: i for i, m in enumerate(editors)}
    pool: dict[tuple[int, int], list[str]] = {}
    for iid, it in items.items():
        if it["task"] == "pairwise" and iid not in seen:
            pool.setdefault((idx[it["a"]["editor"]], idx[it["b"]["editor"]]), []).append(iid)
    if not pool:
        return None
    counts = dict(shown or {})
    comps = comparisons_of(items, votes, editors)
    cands = uncertain_pairs(comps, len(editors), ties, sorted(pool), stop_at)
    if not cands:
        return None

    def take(i: int, j: int) -> str | None:
        options = pool.get((i, j)) or []
        if not options:
            return None
        least = min(counts.get(o, 0) for o in options)
        choices = sorted(o for o in options if counts.get(o, 0) == least)
        return choices[rng.randrange(len(choices))]

    picked: list[str] = []

    def pick(i: int, j: int) -> int | None:
        found = take(i, j)
        if found is None:
            return None
        picked.append(found)
        return len(picked) - 1

    allot_round(cands, 1, pick)
    return picked[0] if picked else None
