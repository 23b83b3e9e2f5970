"""Small edit sets for the labelling tests, the load benchmark and the docs' screenshots: coloured
pictures (a source, and each editor's version of it: a shape of the editor's colour drawn on it) in a
manifest with the ``model`` column, and optionally sessions of several turns."""

from __future__ import annotations

import json
from pathlib import Path

COLOURS = ((214, 69, 65), (52, 152, 219), (46, 160, 67), (243, 156, 18), (142, 68, 173), (26, 188, 156),
           (127, 140, 141), (230, 126, 34))


def make_edit_set(folder: str | Path, sources: int = 2, editors: int = 5, turns: int = 0, size: int = 96) -> Path:
    """Write ``folder/manifest.jsonl`` and its images; returns the manifest. ``turns`` > 0: each source is a
    session of that many turns (columns ``session`` and ``turn``), every editor editing its own last output."""
    from PIL import Image, ImageDraw

    out = Path(folder)
    (out / "img").mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    for s in range(sources):
        src = out / "img" / f"src{s}.png"
        im = Image.new("RGB", (size, size), (235 - 20 * (s % 5), 230, 220 - 15 * (s % 4)))
        ImageDraw.Draw(im).ellipse((size // 4, size // 4, 3 * size // 4, 3 * size // 4), fill=(90, 90, 90))
        im.save(src)
        for e in range(editors):
            prev = src
            for t in range(max(turns, 1)):
                base = Image.open(prev).convert("RGB")
                d = ImageDraw.Draw(base)
                x = 6 + (e * 7 + t * 11) % (size // 2)
                d.rectangle((x, 6 + 10 * t, x + size // 3, 6 + 10 * t + size // 4), fill=COLOURS[e % len(COLOURS)])
                dst = out / "img" / f"src{s}_ed{e}_t{t}.png"
                base.save(dst)
                row: dict[str, object] = {"id": f"s{s}/e{e}" + (f"/t{t + 1}" if turns else ""), "source": str(prev.relative_to(out)),
                       "edited": str(dst.relative_to(out)), "model": f"editor{e}",
                       "instruction": (("add a coloured box" if t == 0 else "add another box below the last one") if turns
                                       else f"add a coloured box to picture {s}")}
                if turns:
                    row.update({"session": f"s{s}", "turn": t + 1})
                rows.append(row)
                prev = dst
    manifest = out / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return manifest


def answer_as_shown(item: dict, left: str | None, truth: dict) -> dict:
    """A canonical answer (pairwise ``{"choice": A|B|tie|both_bad}``, point-wise ``{"scores"}``) as the page
    sends it: pairs by the side the chosen edit was shown on."""
    if item["task"] != "pairwise":
        return dict(truth)
    c = truth["choice"]
    if c in ("A", "B"):
        chosen = item["a"]["id"] if c == "A" else item["b"]["id"]
        return {"choice": "left" if chosen == left else "right"}
    return {"choice": c}


def synthetic_annotator(task, name: str, truth, accuracy: float, rng, domain) -> int:
    """Answer every position of ``name``'s list through :meth:`Task.vote`: the true answer (``truth(item_id)``)
    with probability ``accuracy``, else an answer drawn uniformly from ``domain(item_id)``. Returns votes."""
    n = 0
    while True:
        row = task.current(name)
        if row is None:
            return n
        true = truth(row["item"])
        given = true if rng.random() < accuracy else domain(row["item"])[rng.randrange(len(domain(row["item"])))]
        task.vote(name, row["position"], answer_as_shown(task.items[row["item"]], row["left"], given))
        n += 1
