"""``editlens runs merge OUT SHARD_DIR...``: join the folders that ``--shard I/N``
runs wrote (``edit``, ``run``, ``bench run``, ``arena``) into the one folder a single process
would have written: the same images, the same manifest and log rows in the same
order, the same results and, for a benchmark, the table computed over every case.

Shards are refused when they cannot come from one job: another kind of folder,
another number of shards, a shard missing or given twice, other data (the whole
input's fingerprint, :func:`editlens.runner.shards.ids_digest`), another editor,
its settings, weights or seed, other evaluators or judge, other table settings.
The message names what differs and in which folder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from editlens.core.io import atomic_write, read_json, read_jsonl, write_json, write_jsonl
from editlens.errors import InputError

#: what decides an edit folder's images (editor.json keys compared between shards)
EDITOR_KEYS = ("editor", "spec", "settings", "seed", "seed_rule", "samples")


def _load(path: Path) -> Any:
    return read_json(path, hint=f"is {path.parent} a shard folder of `editlens edit/run/bench run --shard`?")


def _stages(folder: Path) -> list[str]:
    """The generation folders of one editor: ``.``, or ``step1``, ``step2``... (``edit --bench`` of a
    multi-turn benchmark), as paths relative to ``folder``."""
    return sorted({p.relative_to(folder).parent.as_posix() for p in folder.rglob("editor.json")})


def _prefixes(folder: Path, out: Path) -> list[tuple[str, str]]:
    """How a path inside the shard ``folder`` is written, and the same path in ``out``."""
    pairs = [(str(folder.resolve()), str(out.resolve())), (str(folder), str(out))]
    return [(a.rstrip("/") + "/", b.rstrip("/") + "/") for a, b in dict(pairs).items()]


def _relocate(value: Any, pairs: Sequence[tuple[str, str]]) -> Any:
    """``value`` (JSON) with every path that points into a shard folder pointed at the merged one
    (a later turn's source is an earlier turn's image; a result names the image it was scored on)."""
    if isinstance(value, str):
        for a, b in pairs:
            if value.startswith(a):
                return b + value[len(a):]
        return value
    if isinstance(value, list):
        return [_relocate(v, pairs) for v in value]
    if isinstance(value, dict):
        return {k: _relocate(v, pairs) for k, v in value.items()}
    return value


def kind_of(folder: Path) -> str:
    """``edit``, ``bench`` or ``run``: what kind of output ``folder`` is (a shard says so in its
    ``shard.json``, even one that holds no work)."""
    try:
        doc = read_json(folder / "shard.json")
    except InputError:  # no shard.json (or a damaged one): told by the folder's files below
        doc = {}
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind in ("edit", "run", "bench", "arena"):
        return str(kind)
    if (folder / "editor.json").is_file() or (not (folder / "run").is_dir() and any(folder.glob("step*/editor.json"))):
        return "edit"
    if (folder / "table.json").is_file() and (folder / "run").is_dir():
        return "bench"
    if (folder / "results.sqlite").is_file():
        return "run"
    raise InputError(f"{folder}: not an `editlens edit`, `run` or `bench run` output folder")


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _differences(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
        return out
    return [] if a == b else [f"{where or 'value'} {a!r} vs {b!r}"]


def _same(docs: Sequence[tuple[Path, Any]], what: str) -> None:
    """Refuse when any folder's ``what`` differs from the first's, naming the field and the folders."""
    (first, ref), *rest = docs
    for folder, doc in rest:
        diffs = _differences(ref, doc)
        if diffs:
            shown = "; ".join(diffs[:5]) + (f" (and {len(diffs) - 5} more)" if len(diffs) > 5 else "")
            raise InputError(f"{folder} was made with other {what} than {first}: {shown}. Shards of one job share "
                             "them; rerun that shard with the job's settings")


def _shards(folders: Sequence[Path]) -> list[dict[str, Any]]:
    """Every folder's ``shard.json``, checked: one job, every shard once."""
    docs = [_load(f / "shard.json") for f in folders]
    _same([(f, {"count": d.get("count"), "inputs_sha256": d.get("inputs_sha256")}) for f, d in zip(folders, docs)],
          "shard count or input data (inputs_sha256: the whole input's fingerprint)")
    count = int(docs[0]["count"])
    seen: dict[int, Path] = {}
    for f, d in zip(folders, docs):
        if int(d["index"]) in seen:
            raise InputError(f"shard {d['shard']} given twice: {seen[int(d['index'])]} and {f}")
        seen[int(d["index"])] = f
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        raise InputError(f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing: give all {count} "
                         "shard folders (a merge of part of a job would look complete)")
    return docs


def _fresh(out: Path, folders: Sequence[Path]) -> None:
    if any(out.resolve() == f.resolve() for f in folders):
        raise InputError(f"{out} is one of the shard folders; merge into a new folder")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out} exists and is not empty; merge into a new folder")
    out.mkdir(parents=True, exist_ok=True)


# --- edit folders ---------------------------------------------------------------------------------------------


def _check_editors(folders: Sequence[Path]) -> list[tuple[Path, Any]]:
    records = [(f, _load(f / "editor.json")) for f in folders]
    ident = [(f, {**{k: r.get(k) for k in EDITOR_KEYS}, "weights.sha256": (r.get("weights") or {}).get("sha256")})
             for f, r in records]
    _same(ident, "editor settings, weights or seed")
    return records


def merge_edits(out: Path, folders: Sequence[Path], order: Sequence[str] | None = None,
                moves: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """Join ``editlens edit`` shard folders: images, ``generations.jsonl`` (the last record per image),
    ``manifest.jsonl`` and ``editor.json``, in the input's order (``order``: the edit ids; default
    the shards' ``shard.json``)."""
    from editlens.runner.edit import _read_log

    records = _check_editors(folders)
    if order is None:
        order = _shards(folders)[0]["ids"]
    pos = {eid: i for i, eid in enumerate(order)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "images").mkdir(exist_ok=True)
    state: dict[tuple[str, int], dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for f in folders:
        for key, rec in _read_log(f / "generations.jsonl").items():
            if key in state:
                raise InputError(f"edit {key[0]!r} sample {key[1]} is in two shards ({f} and another): the "
                                 "shards overlap")
            if key[0] not in pos:
                raise InputError(f"{f}: edit {key[0]!r} is not in the job's input")
            state[key] = rec
            if rec.get("status") == "done":
                shutil.copy2(f / rec["edited"], out / rec["edited"])
        if (f / "manifest.jsonl").is_file():
            rows += [_relocate(json.loads(line), moves)
                     for line in (f / "manifest.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    keys = sorted(state, key=lambda k: (pos[k[0]], k[1]))
    write_jsonl(out / "generations.jsonl", [state[k] for k in keys], ensure_ascii=False, default=str)
    rows.sort(key=lambda r: (pos[str(r["edit_id"])], int(r.get("sample") or 0)))
    write_jsonl(out / "manifest.jsonl", rows, ensure_ascii=False, default=str)
    record = {k: v for k, v in records[0][1].items() if k != "shard"}
    write_json(out / "editor.json", {**record, "merged_from": [str(f) for f in folders]}, default=str)
    done = sum(1 for r in state.values() if r.get("status") == "done")
    return {"kind": "edit", "out": str(out), "images": done, "failed": len(state) - done, "shards": len(folders)}


def merge_staged_edits(out: Path, folders: Sequence[Path], order: Sequence[str] | None = None,
                       moves: Sequence[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Join one editor's shard folders stage by stage (``edit --bench`` writes ``stepN/`` folders
    for cases made from earlier cases' edits)."""
    if order is None:
        order = _shards(folders)[0]["ids"]
    if moves is None:
        moves = [pair for f in folders for pair in _prefixes(f, out)]
    totals: dict[str, Any] = {"kind": "edit", "out": str(out), "images": 0, "failed": 0, "shards": len(folders)}
    for stage in sorted({st for f in folders for st in _stages(f)}):
        parts = [f / stage for f in folders if (f / stage / "editor.json").is_file()]
        res = merge_edits(out / stage, parts, order=order, moves=moves)
        totals["images"] += res["images"]
        totals["failed"] += res["failed"]
    return totals


def _check_staged(folders: Sequence[Path]) -> None:
    for stage in sorted({st for f in folders for st in _stages(f)}):
        _check_editors([f / stage for f in folders if (f / stage / "editor.json").is_file()])


# --- run folders ----------------------------------------------------------------------------------------------


def _evaluators(folder: Path) -> list[dict[str, Any]]:
    from editlens.runner.store import ResultsStore

    store = ResultsStore(folder)
    try:
        manifest = store.get_meta("manifest") or {}
    finally:
        store.close()
    return [{"name": e.get("name"), "config_hash": e.get("config_hash")} for e in manifest.get("evaluators", [])]


def _merge_store(out: Path, folders: Sequence[Path], order: Sequence[str],
                 moves: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The shards' result stores in one (``OUT/results.sqlite``), with ``results.jsonl``,
    ``summary.json`` and ``manifest.json`` as a single run writes them."""
    from editlens.runner.run import summarize
    from editlens.runner.store import ResultsStore

    _same([(f, _evaluators(f)) for f in folders], "evaluators (names and settings)")
    store = ResultsStore(out)
    try:
        for i, f in enumerate(folders):  # images of a shard's own folder (its edits) are the merged folder's
            store.absorb(f, moves, meta=i == 0)
    finally:
        store.close()
    pos = {sid: i for i, sid in enumerate(order)}
    records: list[dict[str, Any]] = []
    for f in folders:
        if (f / "results.jsonl").is_file():
            records += [_relocate(json.loads(line), moves)
                        for line in (f / "results.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    records.sort(key=lambda r: pos.get(r["id"], len(pos)))
    store = ResultsStore(out)
    try:
        current = store.current_configs()
        ids = {r["id"] for r in records}
        rows = [r for r in store.rows(current) if r["sample_id"] in ids]
        manifest = dict(store.get_meta("manifest") or {})
        names = [e["name"] for e in manifest.get("evaluators", [])]
        names += sorted(set(current) - set(names))
        summary = summarize(rows, names)
        parts = [_load(f / "summary.json") for f in folders if (f / "summary.json").is_file()]
        summary.update({"samples": len(records), "computed": sum(p.get("computed", 0) for p in parts),
                        "reused": sum(p.get("reused", 0) for p in parts),
                        "interrupted": any(p.get("interrupted") for p in parts),
                        "seconds": round(sum(p.get("seconds", 0) for p in parts), 3)})
        manifest.pop("shard", None)
        manifest.update({"counts": summary["counts"], "merged_from": [str(f) for f in folders],
                         "interrupted": summary["interrupted"]})
        store.set_meta("manifest", manifest)
        store.set_meta("summary", summary)
    finally:
        store.close()
    atomic_write(out / "results.jsonl", lambda fh: fh.writelines(json.dumps(r, default=str) + "\n" for r in records))
    atomic_write(out / "summary.json", lambda fh: json.dump(summary, fh, indent=2, default=str))
    atomic_write(out / "manifest.json", lambda fh: json.dump(manifest, fh, indent=2, default=str))
    return summary


def merge_runs(out: Path, folders: Sequence[Path]) -> dict[str, Any]:
    """Join ``editlens run --shard`` folders into one run folder."""
    docs = _shards(folders)
    moves = [pair for f in folders for pair in _prefixes(f, out)]
    gens = [f / "edits" for f in folders if (f / "edits" / "shard.json").is_file()]
    if gens:  # `run --editor --shard`: the edits it made (OUT/edits) are joined too
        merge_staged_edits(out / "edits", gens, moves=moves)
    summary = _merge_store(out, folders, docs[0]["ids"], moves)
    return {"kind": "run", "out": str(out), "samples": summary["samples"], "counts": summary["counts"],
            "shards": len(folders)}


# --- benchmark folders ----------------------------------------------------------------------------------------


def _check_bench(folders: Sequence[Path]) -> tuple[list[dict[str, Any]], list[tuple[Path, Any]]]:
    docs = _shards(folders)
    settings = ("benchmark", "split", "limit", "n_boot", "seed", "models")
    _same([(f, {k: d.get(k) for k in settings}) for f, d in zip(folders, docs)], "benchmark settings")
    tables = [(f, _load(f / "table.json")) for f in folders]
    _same([(f, {"judge": {k: v for k, v in (t.get("judge") or {}).items() if k != "provenance"},
                "prompts": t.get("prompts"), "metrics": t.get("metrics")}) for f, t in tables], "judge or metrics")
    _same([(f, {"answers": (t.get("answers") or {}).get("policy"), "images": (t.get("images") or {}).get("as"),
                "release": t.get("release")}) for f, t in tables], "answer policy, images sent or release")
    for name in docs[0]["models"]:  # each editor's settings, weights and seed, stage by stage
        _check_staged([f / "edits" / name for f in folders if (f / "edits" / name).is_dir()])
    _same([(f, _evaluators(f / "run")) for f in folders], "evaluators (names and settings)")
    return docs, tables


def merge_bench(out: Path, folders: Sequence[Path]) -> dict[str, Any]:
    """Join ``editlens bench run --shard`` folders: the editors' edits, the run store, then the
    table of every case, computed as one process computes it (same rows, same order, same bootstrap)."""
    from editlens.bench.registry import get
    from editlens.bench.table import comparison
    from editlens.runner.bench import _lower_is_better, answers_summary, write_tables

    docs, tables = _check_bench(folders)
    doc = docs[0]
    moves = [pair for f in folders for pair in _prefixes(f, out)]
    item_pos = {iid: i for i, iid in enumerate(doc["ids"])}
    model_pos = {m: i for i, m in enumerate(doc["models"])}

    def key(sid: str) -> tuple[int, int]:
        model, _, item = sid.partition("/")
        return model_pos.get(model, len(model_pos)), item_pos.get(item, len(item_pos))

    # the editors' edits (each editor's folder, stage by stage), in the benchmark's order
    editors: dict[str, Any] = {}
    for name in doc["models"]:
        parts = [f / "edits" / name for f in folders if (f / "edits" / name).is_dir()]
        if not parts:
            continue
        merge_staged_edits(out / "edits" / name, parts, order=doc["ids"], moves=moves)
        stages = _stages(out / "edits" / name)
        editors[name] = _load(out / "edits" / name / stages[-1] / "editor.json") if stages else None
    samples = sorted((sid for d in docs for sid in d["samples"]), key=key)
    skipped = {sid for d in docs for sid in d["skipped"]}
    _merge_store(out / "run", [f / "run" for f in folders], samples, moves)
    rows: list[dict[str, Any]] = []
    for f in folders:
        rows += read_jsonl(f / "items.jsonl")
    rows.sort(key=lambda r: (r["id"] in skipped, *key(r["id"])))
    bench = get(doc["benchmark"], split=doc.get("split"))
    first = tables[0][1]
    policy = (first.get("answers") or {}).get("policy")
    release = first.get("release")
    bench.answers = policy or bench.answers
    bench.release = (release.get("commit") if isinstance(release, dict) else release) or None
    if first.get("metrics"):
        bench.metrics = dict(first["metrics"])
    table = bench.table(rows, n_boot=int(doc["n_boot"]), seed=int(doc["seed"]))
    table["comparison"] = comparison(table, bench.spec.table_layout.get("rank_by"), _lower_is_better(bench))
    table.update({k: first.get(k) for k in ("judge", "prompts", "metrics", "bootstrap", "notes", "images")})
    table["answers"] = answers_summary(bench, rows, str((first.get("answers") or {}).get("requested") or policy)) \
        if first.get("answers") else None
    table.setdefault("release", bench.release_version())
    unreadable = sorted({u for _, t in tables for u in (t.get("unreadable") or [])})
    table["unreadable"] = unreadable or None
    table.update({"editors": ({k: v for k, v in editors.items() if v} or None) if first.get("editors") else None,
                  "run_dir": str(out / "run"), "interrupted": any(t.get("interrupted") for _, t in tables),
                  "stopped_by": None, "merged_from": [str(f) for f in folders]})
    files = write_tables(table, rows, out)
    failed = sum(1 for r in rows if r["status"] == "failed" and r["id"] not in set(unreadable))
    table["files"] = {k: str(v) for k, v in files.items()}
    table["exit"] = 1 if failed or table["interrupted"] else 2 if unreadable else 0
    return {"kind": "bench", "out": str(out), "rows": len(rows), "shards": len(folders), "table": table}


# --- arenas ---------------------------------------------------------------------------------------------------


def _arena_settings(doc: Mapping[str, Any]) -> dict[str, Any]:
    sched = doc.get("schedule") or {}
    return {"judge_identity": doc.get("judge_identity"), "ties": doc.get("ties"),
            **{k: sched.get(k) for k in ("stop_at", "budget", "round_size", "seed")}}


def _check_arena(folders: Sequence[Path]) -> list[tuple[Path, Any]]:
    docs = [(f, _load(f / "arena.json")) for f in folders]
    _same([(f, {**_arena_settings(d), "n_boot": _load(f / "shard.json").get("n_boot")}) for f, d in docs],
          "judge or arena settings")
    return docs


def merge_arena(out: Path, folders: Sequence[Path]) -> dict[str, Any]:
    """Join ``editlens arena --shard`` folders: every shard's verdicts (``comparisons.jsonl`` and the
    verdict cache) and the ratings fitted over all of them. Each shard chose its pairs adaptively
    among its own sources, so the verdicts are not the ones a single process would have asked for;
    a rerun of ``arena`` without ``--shard`` into the merged folder replays every cached verdict
    and asks only what the whole-arena schedule still wants."""
    from editlens.runner.arena import Contest, _Judged, ratings_document

    shards = _shards(folders)
    docs = _check_arena(folders)
    keys = shards[0]["ids"]
    pos = {k: i for i, k in enumerate(keys)}
    editors = list(shards[0]["editors"])
    idx = {m: i for i, m in enumerate(editors)}
    lines: list[dict[str, Any]] = []
    for f in folders:
        lines += read_jsonl(f / "comparisons.jsonl")
    lines.sort(key=lambda v: pos.get(v["source"], len(pos)))  # stable: each shard's own order within a source
    judged = [_Judged(pos[v["source"]], idx[v["a"]], idx[v["b"]],
                      {k: val for k, val in v.items() if k not in ("source", "a", "b", "id_a", "id_b")})
              for v in lines]
    first = docs[0][1]
    sched = first.get("schedule") or {}
    human = (first.get("human") or {}).get("reference")
    doc = ratings_document(editors, [Contest(k, "", "") for k in keys], judged, ties=first["ties"],
                           n_boot=int(shards[0]["n_boot"]), seed=int(sched.get("seed") or 0),
                           human=human, noop=(first.get("input") or {}).get("noop"))
    doc.update({"judge": first.get("judge"), "judge_identity": first.get("judge_identity"),
                "input": first.get("input"), "merged_from": [str(f) for f in folders],
                "schedule": {**{k: sched.get(k) for k in ("stop_at", "budget", "round_size", "seed")},
                             "shards": len(folders), "comparisons": len(judged),
                             "all_pairs": sum((d.get("schedule") or {}).get("all_pairs", 0) for _, d in docs),
                             "rounds": max((d.get("schedule") or {}).get("rounds", 0) for _, d in docs),
                             "stopped": "; ".join(f"shard {sh['shard']}: {(d.get('schedule') or {}).get('stopped')}"
                                                  for sh, (_, d) in zip(shards, docs)),
                             "asked": sum((d.get("schedule") or {}).get("asked", 0) for _, d in docs),
                             "cached": sum((d.get("schedule") or {}).get("cached", 0) for _, d in docs)}})
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "comparisons.jsonl", lambda fh: fh.writelines(json.dumps(v, default=str) + "\n" for v in lines))
    atomic_write(out / "arena.json", lambda fh: json.dump(doc, fh, indent=1, default=str))
    caches = [f / "verdicts.sqlite" for f in folders if (f / "verdicts.sqlite").is_file()]
    if caches:  # the verdicts, so a rerun into the merged folder asks none of them again
        from editlens.runner.arena import verdict_cache

        shutil.copy2(caches[0], out / "verdicts.sqlite")
        cache = verdict_cache(out)
        try:
            for c in caches[1:]:
                cache.absorb(c)
        finally:
            cache.close()
    return {"kind": "arena", "out": str(out), "comparisons": len(judged), "shards": len(folders), "arena": doc}


def merge_shards(out: str | Path, folders: Sequence[str | Path]) -> dict[str, Any]:
    """Join the shard folders ``folders`` (all of one job: ``edit``, ``run`` or ``bench run``
    with ``--shard I/N``) into ``out`` (new or empty). Returns what was merged."""
    out, paths = Path(out), [Path(f) for f in folders]
    if not paths:
        raise InputError("give the shard folders to merge")
    for f in paths:
        if not f.is_dir():
            raise InputError(f"{f}: no such folder")
    kinds = {f: kind_of(f) for f in paths}
    if len(set(kinds.values())) > 1:
        raise InputError("the folders are of different kinds: " + ", ".join(f"{f} ({k})" for f, k in kinds.items()))
    kind = kinds[paths[0]]
    _shards(paths)  # one job, every shard once, same settings: checked before anything is written
    {"edit": _check_staged, "run": lambda fs: _same([(f, _evaluators(f)) for f in fs], "evaluators"),
     "bench": _check_bench, "arena": _check_arena}[kind](paths)
    _fresh(out, paths)
    return {"edit": merge_staged_edits, "run": merge_runs, "bench": merge_bench, "arena": merge_arena}[kind](out, paths)
