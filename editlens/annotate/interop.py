"""Label Studio, for teams that label there: the task's labelling config (XML) and tasks (JSON) to import
into a Label Studio project, and Label Studio's JSON export read back into the same ``votes.sqlite``.

The config asks what the editlens page asks: a pair's four outcomes (left better, right better, tie, both
bad; hotkeys 1-4) and a reason, or each criterion of the point-wise preset on its scale with the rubric.
Each task carries the editlens item id and, for pairs, which edit is on the left (drawn from the seed), so
an imported answer is turned into the pair's own A / B as a page answer is. Imported votes are tagged
``labelstudio``, their annotators ``ls-<id or e-mail>`` (no token: they cannot open the page), and each
Label Studio annotation id is kept: importing the same export twice adds nothing.
"""

from __future__ import annotations

import json
import random
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping
from xml.sax.saxutils import quoteattr

from editlens.core.io import read_json
from editlens.errors import InputError

#: the stored value of each pair outcome in the config (Choice aliases)
PAIR_CHOICES = (("left", "Left is better", "1"), ("right", "Right is better", "2"), ("tie", "Tie: both good", "3"),
                ("both_bad", "Both bad", "4"))
LOCAL_FILES = "/data/local-files/?d="


def config_xml(task: Any) -> str:
    """The Label Studio labelling config of a task."""
    if task.settings["task"] == "pairwise":
        choices = "\n".join(f"    <Choice value={quoteattr(label)} alias={quoteattr(v)} hotkey={quoteattr(k)}/>"
                            for v, label, k in PAIR_CHOICES)
        return f"""<View>
  <Header value={quoteattr(task.preset['title'])}/>
  <Text name="rubric" value={quoteattr(task.preset['rubric'])}/>
  <Header value="$instruction" size="4"/>
  <Image name="source" value="$source" maxWidth="480px"/>
  <View style="display:flex; gap:8px">
    <Image name="left" value="$left" maxWidth="480px"/>
    <Image name="right" value="$right" maxWidth="480px"/>
  </View>
  <Choices name="preference" toName="left" choice="single" required="true" showInline="true">
{choices}
  </Choices>
  <TextArea name="reason" toName="left" placeholder="Why? (optional)" maxSubmissions="1"/>
</View>
"""
    parts = [f"<View>\n  <Header value={quoteattr(task.preset['title'])}/>", '  <Header value="$instruction" size="4"/>',
             '  <View style="display:flex; gap:8px">', '    <Image name="source" value="$source" maxWidth="480px"/>',
             '    <Image name="edited" value="$edited" maxWidth="480px"/>', "  </View>"]
    for c in task.preset["criteria"]:
        parts.append(f"  <Header value={quoteattr(c['label'] + ': ' + c['rubric'])} size=\"6\"/>")
        parts.append(f"  <Choices name={quoteattr(c['name'])} toName=\"edited\" choice=\"single\" required=\"true\" "
                     "showInline=\"true\">")
        for s in c["scale"]:
            hint = f" hint={quoteattr(s['rubric'])}" if s.get("rubric") else ""
            parts.append(f"    <Choice value={quoteattr(s['label'])} alias={quoteattr(_num(s['value']))}{hint}/>")
        parts.append("  </Choices>")
    parts.append('  <TextArea name="reason" toName="edited" placeholder="Why? (optional)" maxSubmissions="1"/>')
    parts.append("</View>\n")
    return "\n".join(parts)


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def tasks_json(task: Any, url_prefix: str = LOCAL_FILES, image_root: str | Path = "/") -> list[dict[str, Any]]:
    """One Label Studio task per regular item: image URLs are ``url_prefix`` + the path relative to
    ``image_root`` (Label Studio's local files by default: serve ``/`` as its document root, or give your
    own prefix)."""
    root = Path(image_root).resolve()

    def url(p: str) -> str:
        try:
            rel = Path(p).resolve().relative_to(root)
        except ValueError:
            raise InputError(f"{p}: not under --image-root {root}") from None
        return url_prefix + str(rel)

    rng = random.Random(task.settings["seed"] + 7)
    out = []
    for iid, it in task.items.items():
        if iid in task.gold:
            continue
        data: dict[str, Any] = {"editlens_item": iid, "instruction": it["instruction"], "source": url(it["source"])}
        if it["task"] == "pairwise":
            left, right = (it["a"], it["b"]) if rng.random() < 0.5 else (it["b"], it["a"])
            data.update({"left": url(left["edited"]), "right": url(right["edited"]), "left_id": left["id"]})
        else:
            data["edited"] = url(it["edited"])
        out.append({"data": data})
    return out


def write_labelstudio(folder: str | Path, out: str | Path, url_prefix: str = LOCAL_FILES,
                      image_root: str | Path = "/") -> list[Path]:
    from editlens.annotate.task import Task
    from editlens.core.io import atomic_write

    t = Task(folder)
    try:
        xml, tasks = config_xml(t), tasks_json(t, url_prefix, image_root)
    finally:
        t.close()
    dest = Path(out)
    atomic_write(dest / "config.xml", lambda fh: fh.write(xml))
    atomic_write(dest / "tasks.json", lambda fh: json.dump(tasks, fh, indent=1))
    return [dest / "config.xml", dest / "tasks.json"]


def _who(completed_by: Any) -> str:
    if isinstance(completed_by, Mapping):
        completed_by = completed_by.get("email") or completed_by.get("id")
    if completed_by is None:
        raise InputError("an annotation has no completed_by")
    return "ls-" + re.sub(r"[^A-Za-z0-9_.@-]", "_", str(completed_by))[:60]


def _when(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def import_labelstudio(folder: str | Path, export_file: str | Path) -> dict[str, int]:
    """Read Label Studio's JSON export into ``folder/votes.sqlite``. Returns counts: imported, already there,
    cancelled (skipped)."""
    from editlens.annotate.store import DuplicateVote
    from editlens.annotate.task import Task

    p = Path(export_file)
    doc = read_json(p, "Label Studio's JSON export")
    if not isinstance(doc, list):
        raise InputError(f"{p}: expected a JSON list of tasks (Label Studio: Export -> JSON)")
    t = Task(folder)
    counts = {"imported": 0, "already_there": 0, "cancelled": 0}
    try:
        pairwise = t.settings["task"] == "pairwise"
        names = t.store.annotators()
        next_pos: dict[str, int] = {}
        for r in t.store.assignments():
            next_pos[r["annotator"]] = max(next_pos.get(r["annotator"], 0), r["position"] + 1)
        for k, task in enumerate(doc):
            where = f"{p}: task {k}"
            data = (task or {}).get("data") or {}
            iid = data.get("editlens_item")
            if iid not in t.items:
                raise InputError(f"{where}: editlens_item {iid!r} is not an item of {folder} (export the tasks with "
                                 "`editlens annotate labelstudio-export` from this folder)")
            for ann in task.get("annotations") or []:
                if ann.get("was_cancelled"):
                    counts["cancelled"] += 1
                    continue
                results = {r.get("from_name"): r.get("value") or {} for r in ann.get("result") or []}
                body: dict[str, Any] = {}
                try:
                    if pairwise:
                        got = (results.get("preference") or {}).get("choices") or []
                        by_label = {label: v for v, label, _ in PAIR_CHOICES}
                        body["choice"] = by_label.get(got[0], got[0]) if got else None
                    else:
                        scores = {}
                        for c in t.preset["criteria"]:
                            got = (results.get(c["name"]) or {}).get("choices") or []
                            labels = {s["label"]: s["value"] for s in c["scale"]}
                            if got:
                                scores[c["name"]] = labels[got[0]] if got[0] in labels else float(got[0])
                        body["scores"] = scores
                    left = data.get("left_id") if pairwise else None
                    answer = t.answer_of(iid, left, body)
                except (InputError, ValueError, IndexError) as exc:
                    raise InputError(f"{where}, annotation {ann.get('id')}: {exc}") from None
                who = _who(ann.get("completed_by"))
                ext = f"labelstudio:{ann.get('id')}" if ann.get("id") is not None else None
                if ext is not None and any(v["external_id"] == ext for v in t.store.votes(who)):
                    counts["already_there"] += 1
                    continue
                if who not in names:
                    t.store.add_annotator(who, None, origin="labelstudio")
                    names[who] = {"token": None, "origin": "labelstudio"}
                pos = next_pos.get(who, 0)
                kind = "gold" if iid in t.gold else "item"
                t.store.put_assignments([(who, pos, iid, kind, left, None)])
                text = (results.get("reason") or {}).get("text") or []
                try:
                    t.store.add_vote(who, pos, iid, kind, answer, text[0] if text else None, left, None,
                                     origin="labelstudio", external_id=ext, at=_when(ann.get("created_at")))
                except DuplicateVote:
                    counts["already_there"] += 1
                    continue
                next_pos[who] = pos + 1
                counts["imported"] += 1
    finally:
        t.close()
    return counts
