"""Small, fully determined human-label benchmark files for the meta-evaluation goldens
(tests/test_meta_golden.py): every `editlens meta-eval` command and `editlens calibrate`
runs on them, and the outputs are compared byte for byte with tests/golden/meta/."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from editlens.testing import tiny_benchmarks as TB

METHODS = ("M1", "M2", "M3")
UIDS = tuple(f"sample_{i}.jpg" for i in range(12))
INSTRUCTIONS = ("add a red hat", "remove the car", "make the sky blue", "turn it into a painting",
                "change the dog into a cat", "make it night")


def unit(key: str) -> float:
    """A fixed number in [0, 1) from ``key`` (no random state: the same on every machine)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 16 ** 8


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_imagenhub(root: Path) -> Path:
    """``root/ratings/Text-Guided_IE_rater{1,2,3}.tsv`` (with a placeholder Imagic column),
    ``root/samples.jsonl`` (instructions), ``root/judge/<Method>/{SC,PQ}.json`` (one answer
    unparsable) and ``root/preds.jsonl`` ({id: METHOD/UID, model, score})."""
    rng = np.random.default_rng(7)
    (root / "ratings").mkdir(parents=True, exist_ok=True)
    for r in (1, 2, 3):
        lines = ["uid\t" + "\t".join(METHODS) + "\tImagic"]
        for uid in UIDS:
            cells = [f"[{rng.choice([0, 0.5, 1])}, {rng.choice([0, 0.5, 1])}]" for _ in METHODS]
            lines.append(uid + "\t" + "\t".join(cells) + "\t[0, 0]")
        (root / "ratings" / f"Text-Guided_IE_rater{r}.tsv").write_text("\n".join(lines) + "\n")
    _jsonl(root / "samples.jsonl", [{"uid": u, "method": m, "instruction": INSTRUCTIONS[i % len(INSTRUCTIONS)]}
                                    for i, u in enumerate(UIDS) for m in METHODS])
    for m in METHODS:
        (root / "judge" / m).mkdir(parents=True, exist_ok=True)
        sc = {u: {"score": [int(10 * unit(f"sc{m}{u}")), int(10 * unit(f"sc2{m}{u}"))]} for u in UIDS}
        pq = {u: {"score": [int(10 * unit(f"pq{m}{u}")), int(10 * unit(f"pq2{m}{u}"))]} for u in UIDS}
        if m == "M2":
            sc[UIDS[3]] = {"score": "no score here"}
        (root / "judge" / m / "SC.json").write_text(json.dumps(sc))
        (root / "judge" / m / "PQ.json").write_text(json.dumps(pq))
    _jsonl(root / "preds.jsonl", [{"id": f"{m}/{u}", "model": m, "score": round(unit(f"p{m}{u}"), 6)}
                                  for m in METHODS for u in UIDS])
    return root


def write_genai(root: Path) -> Path:
    votes = ("leftvote", "rightvote", "tievote", "bothbad_vote")
    answers = ("[[A>B]]", "[[B>A]]", "[[A=B=Good]]", "[[A=B=Bad]]", "I cannot tell")
    items = [{"idx": i, "response": f"Reasoning... {answers[int(5 * unit(f'g{i}'))]}",
              "human_vote": votes[int(4 * unit(f'v{i}'))]} for i in range(24)]
    root.mkdir(parents=True, exist_ok=True)
    (root / "genai.json").write_text(json.dumps(items))
    return root / "genai.json"


def write_pointwise(root: Path) -> Path:
    """``human.jsonl`` (40 edits by 4 models, human in [0, 1], an instruction each),
    ``results.jsonl`` (an `editlens run` file with evaluators ``j`` and ``k``, one edit
    unscored), ``pairs.jsonl`` (30 pairs) and ``verdicts.jsonl`` (a pairwise judge, both orders)."""
    ids = [(f"{m}/{i}", m) for m in ("ed1", "ed2", "ed3", "ed4") for i in range(10)]
    _jsonl(root / "human.jsonl", [{"id": sid, "model": m, "human": round(unit("h" + sid), 3),
                                   "instruction": INSTRUCTIONS[n % len(INSTRUCTIONS)]} for n, (sid, m) in enumerate(ids)])
    rows = []
    for sid, m in ids:
        h = unit("h" + sid)
        j = {"status": "scored", "value": round(0.6 * h + 0.4 * unit("j" + sid), 6), "reason": None, "details": {}}
        if sid == "ed2/3":
            j = {"status": "unscored", "value": None, "reason": "unparsable answer", "details": {"raw": "??"}}
        k = {"status": "scored", "value": round(10 * unit("k" + sid), 4), "reason": None, "details": {}}
        rows.append({"id": sid, "model": m, "task_type": "local" if unit("t" + sid) < 0.5 else "global",
                     "scores": {"j": j, "k": k}})
    _jsonl(root / "results.jsonl", rows)
    prefs = ("A", "B", "tie")
    pairs = []
    for p in range(30):
        a, b = ids[(3 * p) % 40][0], ids[(7 * p + 5) % 40][0]
        if a == b:
            b = ids[(7 * p + 6) % 40][0]
        ha, hb = unit("h" + a), unit("h" + b)
        pref = "tie" if abs(ha - hb) < 0.05 else ("A" if ha > hb else "B")
        if p % 9 == 4:
            pref = prefs[p % 3]
        pairs.append({"id": f"pair{p}", "a": a, "b": b, "preference": pref})
    _jsonl(root / "pairs.jsonl", pairs)
    verdict = ("A>B", "B>A", "A=B=Good")
    vs = []
    for p in pairs[:-3]:
        f, r = verdict[int(3 * unit("f" + p["id"]))], verdict[int(3 * unit("r" + p["id"]))]
        vs.append({"id": p["id"], "verdict": f if f == r else "A=B",
                   "orders": {"forward": {"verdict": f}, "reverse": {"verdict": r}}})
    vs.append({"id": pairs[-3]["id"], "verdict": None, "orders": {"forward": {"verdict": None}}})
    _jsonl(root / "verdicts.jsonl", vs)
    return root


def _scores_for(manifest: Path, out: Path, metric: str = "m") -> Path:
    rows = []
    for line in manifest.read_text().splitlines():
        sid = json.loads(line)["id"]
        v = unit("s" + sid)
        entry = {"status": "scored", "value": round(v, 6), "reason": None,
                 "details": {"prompt_following": round(unit("pf" + sid), 6)}}
        if unit("u" + sid) < 0.08:
            entry = {"status": "unscored", "value": None, "reason": "unparsable answer", "details": {}}
        rows.append({"id": sid, "scores": {metric: entry}})
    return _jsonl(out, rows)


def write_reward_benches(root: Path) -> dict[str, Path]:
    """The three reward-model benchmarks as published (editlens.testing.tiny_benchmarks), their
    prepared folders and an `editlens run`-shaped results file of each (evaluator ``m``)."""
    from editlens.bench.evaluate import prepare

    out: dict[str, Path] = {}
    es = TB.write_editscore_bench(root / "es", "parquet")
    er = TB.write_editreward_bench(root / "er")
    mm = TB.write_mmrb2(root / "mm")
    for name, src in (("editscore-bench", es), ("editreward-bench", er), ("mmrb2", mm / "edit.json")):
        prep = root / f"{name}-prep"
        prepare(name, src, prep)
        out[name] = src
        out[name + "-prep"] = prep
        out[name + "-results"] = _scores_for(prep / "manifest.jsonl", root / f"{name}-results.jsonl")
    pairs = [json.loads(x) for x in (out["mmrb2-prep"] / "pairs.jsonl").read_text().splitlines()]
    _jsonl(root / "mmrb2-verdicts.jsonl", [
        {"id": p["id"], "verdict": "A>B" if n % 2 == 0 else "A=B",
         "orders": {"forward": {"verdict": "A>B"}, "reverse": {"verdict": "A>B" if n % 2 == 0 else "B>A"}}}
        for n, p in enumerate(pairs)])
    out["mmrb2-verdicts"] = root / "mmrb2-verdicts.jsonl"
    return out


def write_arena(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    editors = [{"editor": e, "rank": n + 1, "rating": round(1500 - 40 * n + 7 * unit(e), 3)}
               for n, e in enumerate(("alpha", "beta", "gamma", "delta"))]
    editors.append({"editor": "noop", "rank": None, "rating": None})
    doc = {"schema": "editlens.arena/1", "judge": "scripted-judge", "ties_model": "davidson", "groups": [],
           "notes": [], "editors": editors}
    (root / "arena.json").write_text(json.dumps(doc))
    (root / "human.json").write_text(json.dumps({"alpha": 3.0, "gamma": 2.5, "beta": 2.0, "delta": 1.0, "zeta": 0.5}))
    return root


def write_all(root: Path) -> None:
    write_imagenhub(root / "ih")
    write_genai(root / "genai")
    write_pointwise(root / "pw")
    write_reward_benches(root / "rb")
    write_arena(root / "arena")
