"""An annotation task: made once in its folder (items, annotators, plan, all in ``votes.sqlite``), then
served, resumed and read. The web page and Python callers go through the same :class:`Task`."""

from __future__ import annotations

import random
import re
import secrets
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from editlens.annotate import plan as P
from editlens.annotate.presets import check_scores, pairwise_preset, pointwise_preset
from editlens.annotate.store import VoteStore
from editlens.errors import InputError

TASKS = ("pairwise", "pointwise")
_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")


def annotator_names(spec: str | int | Sequence[str]) -> list[str]:
    """``"alice,bob"`` or a count (``3`` -> annotator1..annotator3)."""
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        count = int(spec)
        if count < 1:
            raise InputError("--annotators: at least one")
        return [f"annotator{k + 1}" for k in range(count)]
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    for n in names:
        if not _NAME.match(n):
            raise InputError(f"--annotators: {n!r} is not a name (letters, digits, . _ - @, at most 64)")
    if len(set(names)) != len(names):
        raise InputError("--annotators: a name is given twice")
    if not names:
        raise InputError("--annotators: no name")
    return names


class Task:
    """The task of an annotation folder (``DIR/votes.sqlite``)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.store = VoteStore(self.folder)
        self.settings = self.store.settings()
        self.items = self.store.items()
        self.preset = (pairwise_preset() if self.settings["task"] == "pairwise"
                       else pointwise_preset(self.settings["preset"]))
        self.gold: dict[str, Any] = self.store.get_meta("gold") or {}
        self._lock = threading.Lock()  # fills adaptive positions one at a time
        self._rng = random.Random(self.settings["seed"] + 1)

    # -------------------------------------------------------------------------------------------- creation
    @classmethod
    def create(cls, folder: str | Path, source: str | Path, task: str, *, annotators: Sequence[str],
               overlap: int = 1, seed: int = 0, repeats: int = 0, gold: str | Path | None = None,
               preset: str = "imagenhub", adaptive: int | None = None, ties: str = "davidson") -> "Task":
        """Read the edits, form the items, draw the plan and write it all to ``folder/votes.sqlite``."""
        if task not in TASKS:
            raise InputError(f"--task must be pairwise or pointwise, got {task!r}")
        if adaptive is not None and task != "pairwise":
            raise InputError("--adaptive is for pairwise tasks (the arena's scheduler picks pairs)")
        folder = Path(folder)
        if (folder / "votes.sqlite").exists():
            raise InputError(f"{folder}: already holds a task; serve it with `editlens annotate --out {folder}` "
                             "(no source), or pick another --out")
        edits, info = P.read_edits(source)
        items = P.pairwise_items(edits) if task == "pairwise" else P.pointwise_items(edits)
        by_id = {it["id"]: it for it in items}
        pre = None if task == "pairwise" else pointwise_preset(preset)
        golds = P.read_gold(gold, task, by_id, pre) if gold else {}
        rows = P.make_plan(items, annotators, overlap=overlap, seed=seed, repeats=repeats, gold=sorted(golds),
                           adaptive=adaptive)
        settings = {"task": task, "preset": preset if task == "pointwise" else None, "seed": seed,
                    "overlap": overlap, "repeats": repeats, "gold": str(gold) if gold else None,
                    "adaptive": adaptive, "ties": ties, **info}
        store = VoteStore(folder, create=True)
        try:
            store.put_items(items)
            store.set_meta("gold", golds)
            for a in annotators:
                store.add_annotator(a, secrets.token_urlsafe(18))
            store.put_assignments(rows)
            store.set_meta("settings", settings)  # last: a folder without it was never planned
        except BaseException:
            store.close()
            for suffix in ("", "-wal", "-shm"):  # nothing half made is left to be taken for a task
                (folder / f"votes.sqlite{suffix}").unlink(missing_ok=True)
            raise
        store.close()
        P.write_plan_file(folder, P.plan_record(items, rows, settings))
        return cls(folder)

    def close(self) -> None:
        self.store.close()

    # -------------------------------------------------------------------------------------------- serving
    def annotator_of(self, token: str) -> str | None:
        import hmac

        for name, a in self._tokens().items():
            if a["token"] and hmac.compare_digest(a["token"].encode(), token.encode()):
                return name
        return None

    def _tokens(self) -> dict[str, dict[str, Any]]:
        # the annotators with a token are made with the task: read once (imported ones have none)
        if getattr(self, "_token_cache", None) is None:
            self._token_cache = {n: a for n, a in self.store.annotators().items() if a["token"]}
        return self._token_cache

    def current(self, annotator: str) -> dict[str, Any] | None:
        """The annotator's next unanswered position (an adaptive one filled now), or ``None`` when done."""
        with self._lock:
            done = self.store.voted_positions(annotator)
            rows = [r for r in self.store.assignments(annotator) if r["position"] not in done]
            if not rows:
                return None
            row = rows[0]
            if row["item"] is None:
                return self._fill(annotator, row)
            return row

    def _fill(self, annotator: str, row: dict[str, Any]) -> dict[str, Any] | None:
        mine = self.store.assignments(annotator)
        if row["kind"] == "repeat":
            first = next(r for r in mine if r["position"] == row["repeat_of"])
            it = self.items[first["item"]]
            left = it["b"]["id"] if first["left"] == it["a"]["id"] else it["a"]["id"]
            self.store.fill_assignment(annotator, row["position"], first["item"], left)
            return {**row, "item": first["item"], "left": left}
        seen = {r["item"] for r in mine if r["item"]}
        shown: dict[str, int] = {}
        for r in self.store.assignments():
            if r["item"] and r["kind"] == "item":
                shown[r["item"]] = shown.get(r["item"], 0) + 1
        regular = {k: v for k, v in self.items.items() if k not in self.gold}
        iid = P.next_adaptive_pair(regular, self.store.votes(), seen, self._rng, self.settings.get("ties", "davidson"),
                                   shown=shown)
        if iid is None:
            return None
        it = self.items[iid]
        left = it["a"]["id"] if self._rng.random() < 0.5 else it["b"]["id"]
        self.store.fill_assignment(annotator, row["position"], iid, left)
        return {**row, "item": iid, "left": left}

    def vote(self, annotator: str, position: int, body: Mapping[str, Any], shown_ms: int | None = None,
             origin: str = "web") -> int:
        """Check an answer against the position it answers and write it (one committed transaction).
        Pairwise ``{"choice": left|right|tie|both_bad}`` (sides as shown); point-wise ``{"scores": {...}}``."""
        row = self.store.assignment(annotator, position)
        if row is None or row["item"] is None:
            raise InputError(f"position {position} is not on {annotator}'s list (or not reached yet)")
        answer = self.answer_of(row["item"], row["left"], body)
        reason = body.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InputError("reason must be text")
        return self.store.add_vote(annotator, position, row["item"], row["kind"], answer,
                                   (reason or "").strip()[:2000] or None, row["left"], shown_ms, origin)

    def answer_of(self, item_id: str, left: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """The stored answer of an answer as given: a pair's side (left / right, as shown) turned into the
        pair's own A / B; point-wise scores checked against the preset."""
        it = self.items[item_id]
        if it["task"] == "pairwise":
            choice = body.get("choice")
            if choice not in ("left", "right", "tie", "both_bad"):
                raise InputError(f"choice {choice!r}: give left, right, tie or both_bad")
            if choice in ("left", "right"):
                shown_a_left = left == it["a"]["id"]
                return {"choice": "A" if (choice == "left") == shown_a_left else "B", "screen": choice}
            return {"choice": choice, "screen": choice}
        return {"scores": check_scores(self.preset, body.get("scores"))}

    def page_item(self, row: Mapping[str, Any], image_url: Any) -> dict[str, Any]:
        """What the page shows for a position (no editor name, no kind: repeats and gold look like any item)."""
        it = self.items[row["item"]]
        out: dict[str, Any] = {"position": row["position"], "instruction": it["instruction"],
                               "source": image_url(it["source"]), "turn": it.get("turn")}
        if it["task"] == "pairwise":
            left, right = (it["a"], it["b"]) if row["left"] == it["a"]["id"] else (it["b"], it["a"])
            out.update({"left": image_url(left["edited"]), "right": image_url(right["edited"])})
            flip = row["left"] != it["a"]["id"]
            out["history"] = [{"turn": h["turn"], "instruction": h["instruction"],
                               "left": image_url(h["b"] if flip else h["a"]), "right": image_url(h["a"] if flip else h["b"])}
                              for h in it.get("history") or []]
        else:
            out["edited"] = image_url(it["edited"])
            out["history"] = [{"turn": h["turn"], "instruction": h["instruction"], "edited": image_url(h["edited"])}
                              for h in it.get("history") or []]
        return out

    def image_paths(self) -> list[str]:
        """Every image the task shows (the server serves these and nothing else)."""
        paths: set[str] = set()
        for it in self.items.values():
            paths.add(it["source"])
            if it["task"] == "pairwise":
                paths.update((it["a"]["edited"], it["b"]["edited"]))
                for h in it.get("history") or []:
                    paths.update((h["a"], h["b"]))
            else:
                paths.add(it["edited"])
                for h in it.get("history") or []:
                    paths.add(h["edited"])
        return sorted(paths)

    def progress(self, annotator: str) -> dict[str, int]:
        p = self.store.progress_of(annotator)
        return {"done": p["voted"], "total": p["planned"]}

