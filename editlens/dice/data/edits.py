"""Stage-2 training data (paper, sec. 3.3 and supplementary A): synthetic
edits of annotated objects.

Per image: up to ``max_objects`` objects (paper: 4) whose mask covers at
least ``min_area`` of the image (3%) and overlaps every other chosen mask by
at most ``max_overlap`` (5%, of the smaller mask). Each gets the operation
done least so far (balanced ADD/REMOVE/EDIT):

* ADD: the object is inpainted away from the *original*, so the edited image has it;
* REMOVE: it is inpainted away from the *edited* image;
* EDIT: 30% a colour change inside the mask, 70% a substitution by another
  object (the inpainter draws it when it can; the offline OpenCV backend pastes
  another annotated object of a different class instead).

A fraction ``unchanged`` of the images become unchanged pairs. Both images
of every pair are saved as JPEG with a random quality in ``jpeg_range``
(paper: 15-50) so that compression, not inpainting imprints, is what the
detector sees everywhere. Rerandomised per image from (seed, image id): a
resumed run makes the same choices.

With ``coherence=True`` a ``coherence.jsonl`` is written too: per edited
image, a templated instruction for each difference, that difference judged
YES and every other difference of the image NO (a change nobody asked for);
single-difference images also get a NO record under an instruction about
another object. These records are synthetic (template wording, marked in
their ``origin``), for bootstrapping a coherence estimator; the paper's
estimator was trained on human-annotated pairs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from editlens.dice.data.coco import CocoSet
from editlens.dice.data.inpaint import make_inpainter
from editlens.dice.data.store import DatasetStore, difference_stats, provenance
from editlens.dice.types import COMMANDS
from editlens.errors import InputError


@dataclass
class EditConfig:
    annotations: str
    images: str
    out: str
    inpainter: str = "opencv"
    max_objects: int = 4
    min_area: float = 0.03
    max_overlap: float = 0.05
    unchanged: float = 0.15
    colour_fraction: float = 0.3
    jpeg_range: tuple[int, int] = (15, 50)
    coherence: bool = True
    max_images: int | None = None
    seed: int = 0
    inpaint_steps: int | None = None  # diffusers inpainter only; None: the paper's 100
    inpaint_guidance: float | None = None  # diffusers inpainter only; None: the paper's 4
    device: str = "auto"
    inpaint_dtype: str = "auto"


_HUES = [(10, "red"), (22, "orange"), (34, "yellow"), (78, "green"), (100, "cyan"), (130, "blue"), (155, "purple"),
         (172, "pink"), (180, "red")]


def hue_name(hue: float) -> str:
    """OpenCV hue (0-179) -> colour word.

    >>> hue_name(0), hue_name(60), hue_name(120)
    ('red', 'green', 'blue')
    """
    return next(name for top, name in _HUES if hue <= top)


def recolour(image: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """Rotate the hue inside the mask by 40-140 (of 180) and make it vivid; returns the image and the new colour."""
    import cv2

    hsv = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2HSV).astype(np.int32)
    m = mask.astype(bool)
    shift = int(rng.integers(40, 141))
    hsv[..., 0][m] = (hsv[..., 0][m] + shift) % 180
    hsv[..., 1][m] = np.maximum(hsv[..., 1][m], 150)
    hsv[..., 2][m] = np.clip(hsv[..., 2][m], 70, 255)
    out = cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2RGB)
    mean_hue = float(np.median(hsv[..., 0][m])) if m.any() else 0.0
    return out, hue_name(mean_hue)


def mask_box(mask: np.ndarray) -> list[float]:
    """Normalised ``[x0, y0, x1, y1]`` of a mask's pixels."""
    ys, xs = np.nonzero(mask)
    h, w = mask.shape
    return [round(xs.min() / w, 5), round(ys.min() / h, 5), round((xs.max() + 1) / w, 5), round((ys.max() + 1) / h, 5)]


def paste(image: np.ndarray, target: np.ndarray, donor: np.ndarray, donor_mask: np.ndarray) -> np.ndarray:
    """``image`` with the donor object (its mask's bounding crop) scaled into the target mask's box."""
    import cv2

    ys, xs = np.nonzero(target)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    dy, dx = np.nonzero(donor_mask)
    crop = donor[dy.min() : dy.max() + 1, dx.min() : dx.max() + 1]
    cmask = donor_mask[dy.min() : dy.max() + 1, dx.min() : dx.max() + 1].astype(np.uint8)
    size = (int(x1 - x0), int(y1 - y0))
    crop = cv2.resize(crop, size, interpolation=cv2.INTER_LINEAR)
    cmask = cv2.resize(cmask, size, interpolation=cv2.INTER_NEAREST).astype(bool)
    out = image.copy()
    region = out[y0:y1, x0:x1]
    region[cmask] = crop[cmask]
    return out


def choose_objects(masks: list[np.ndarray], min_area: float, max_overlap: float, limit: int,
                   rng: np.random.Generator) -> list[int]:
    """Indices of up to ``limit`` masks, each >= ``min_area`` of the image and
    overlapping each other chosen one by <= ``max_overlap`` of the smaller."""
    if not masks:
        return []
    total = masks[0].size
    areas = [int(m.sum()) for m in masks]
    order = [i for i in rng.permutation(len(masks)).tolist() if areas[i] >= min_area * total]
    chosen: list[int] = []
    for i in order:
        if len(chosen) >= limit:
            break
        if all(int((masks[i] & masks[j]).sum()) <= max_overlap * min(areas[i], areas[j]) for j in chosen):
            chosen.append(i)
    return chosen


def instruction_for(d: dict[str, Any]) -> str:
    e = d.get("edit") or {}
    if d["command"] == "ADD":
        return f"add a {d['object']}"
    if d["command"] == "REMOVE":
        return f"remove the {d['object']}"
    if e.get("kind") == "colour":
        return f"make the {d['object']} {e['target']}"
    return f"replace the {d['object']} with a {e.get('target', 'different object')}"


def _reasoning(d: dict[str, Any], asked: bool, instruction: str) -> str:
    verb = {"ADD": "added", "REMOVE": "removed", "EDIT": "changed"}[d["command"]]
    if asked:
        return f"The marked {d['object']} was {verb}, which is what the instruction asks for."
    return f"The instruction is to {instruction}; the marked {d['object']} was {verb}, which was not asked for."


def coherence_records(rid: str, rec: dict[str, Any], other_classes: list[str], rng: np.random.Generator
                      ) -> list[dict[str, Any]]:
    diffs = rec["differences"]
    out = []
    base = {"source": rec["source"], "edited": rec["edited"], "origin": {"kind": "templated", "pair": rid}}
    for k, asked in enumerate(diffs):
        instr = instruction_for(asked)
        for m, d in enumerate(diffs):
            yes = m == k
            out.append({**base, "id": f"{rid}-{k}-{m}", "instruction": instr, "difference": d,
                        "reasoning": _reasoning(d, yes, instr), "decision": "YES" if yes else "NO"})
    if len(diffs) == 1 and other_classes:
        decoy = {"command": COMMANDS[int(rng.integers(3))], "object": str(rng.choice(other_classes)),
                 "edit": {"kind": "colour", "target": "blue"}}
        instr = instruction_for(decoy)
        out.append({**base, "id": f"{rid}-decoy", "instruction": instr, "difference": diffs[0],
                    "reasoning": _reasoning(diffs[0], False, instr), "decision": "NO"})
    return out


def make_edits(cfg: EditConfig, progress: bool = True) -> dict[str, Any]:
    """Build (or resume) a stage-2 dataset folder; returns its statistics."""
    lo, hi = cfg.jpeg_range
    if not (1 <= lo <= hi <= 100):
        raise InputError(f"JPEG quality range must lie in 1..100 with min <= max, got {cfg.jpeg_range}")
    if not (0 <= cfg.unchanged < 1) or not (0 <= cfg.colour_fraction <= 1) or cfg.max_objects < 1:
        raise InputError("--unchanged must be in [0, 1), colour fraction in [0, 1], --max-objects >= 1")
    coco = CocoSet(cfg.annotations, cfg.images)
    inpainter = make_inpainter(cfg.inpainter, steps=cfg.inpaint_steps, guidance=cfg.inpaint_guidance, seed=cfg.seed,
                               device=cfg.device, dtype=cfg.inpaint_dtype)
    store = DatasetStore(cfg.out)
    store.check_config(asdict(cfg), free=("max_images", "out", "device", "inpaint_dtype"))
    coh = DatasetStore(cfg.out, "coherence.jsonl") if cfg.coherence else None
    store.write_json("provenance.json", {**provenance("dice make-edits", asdict(cfg), [cfg.annotations]),
                                         "inpainter": inpainter.describe()})
    ops = {c: 0 for c in COMMANDS}
    for r in store.records:
        for done in r["differences"]:
            ops[done["command"]] += 1
    ids = sorted(coco.images)[: cfg.max_images]
    # donors for substitution: annotations large enough to be visible when pasted
    donors = [(i, a) for i in ids for a in coco.anns[i]
              if a["bbox"][2] * a["bbox"][3] >= cfg.min_area * coco.images[i].width * coco.images[i].height]
    counts = {"images": len(ids), "skipped_no_eligible_object": 0, "written": 0}
    it: Any = ids
    if progress:
        from tqdm import tqdm

        it = tqdm(ids, desc="synthetic edits", unit="image")
    for image_id in it:
        rid = str(image_id)
        if rid in store.done:
            continue
        rng = np.random.default_rng([cfg.seed, image_id])
        img = coco.load(image_id)
        q_src, q_edt = (int(q) for q in rng.integers(lo, hi + 1, 2))
        diffs: list[dict[str, Any]] = []
        original, edited = img.copy(), img.copy()
        if rng.random() >= cfg.unchanged:
            anns = coco.anns[image_id]
            masks = [coco.mask(a) for a in anns]
            chosen = choose_objects(masks, cfg.min_area, cfg.max_overlap, int(rng.integers(1, cfg.max_objects + 1)),
                                    rng)
            if not chosen:
                counts["skipped_no_eligible_object"] += 1
                continue
            for i in chosen:
                name, m = coco.names[int(anns[i]["category_id"])], masks[i]
                least = min(ops.values())
                op = str(rng.choice([c for c in COMMANDS if ops[c] == least]))
                ops[op] += 1
                d: dict[str, Any] = {"command": op, "object": name, "box": mask_box(m)}
                if op == "ADD":
                    original = inpainter.remove(original, m, name)
                elif op == "REMOVE":
                    edited = inpainter.remove(edited, m, name)
                else:
                    d["edit"] = _edit(edited, m, name, coco, donors, image_id, inpainter, cfg, rng)
                    edited = d["edit"].pop("image")
                diffs.append(d)
        src = store.save_image(original, f"{rid}_source.jpg", q_src)
        edt = store.save_image(edited, f"{rid}_edited.jpg", q_edt)
        h, w = img.shape[:2]
        rec = {"id": rid, "source": src, "edited": edt, "width": w, "height": h, "differences": diffs,
               "jpeg_quality": [q_src, q_edt], "origin": {"image": coco.images[image_id].path.name,
                                                          "inpainter": inpainter.name}}
        if coh is not None and diffs:
            others = sorted(set(coco.names.values()) - {d["object"] for d in diffs})
            for c in coherence_records(rid, rec, others, rng):
                if c["id"] not in coh.done:
                    coh.add(c)
        store.add(rec)  # last: the record marks the image as done
        counts["written"] += 1
    kinds: dict[str, int] = {}
    for r in store.records:
        for d in r["differences"]:
            if "edit" in d:
                kinds[d["edit"]["kind"]] = kinds.get(d["edit"]["kind"], 0) + 1
    stats = {**difference_stats(store.records), "edit_kinds": kinds, "this_run": counts,
             "coherence_records": len(coh.records) if coh else 0,
             "coherence_yes": sum(c["decision"] == "YES" for c in coh.records) if coh else 0}
    store.write_json("stats.json", stats)
    return stats


def _edit(image: np.ndarray, mask: np.ndarray, name: str, coco: CocoSet, donors: list[tuple[int, dict[str, Any]]],
          image_id: int, inpainter: Any, cfg: EditConfig, rng: np.random.Generator) -> dict[str, Any]:
    """An EDIT: colour change or substitution; returns ``{"kind", "target", "image"}``."""
    others = [(i, a) for i, a in donors if coco.names[int(a["category_id"])] != name and i != image_id]
    if rng.random() < cfg.colour_fraction or not others and inpainter.name == "opencv":
        out, colour = recolour(image, mask, rng)
        return {"kind": "colour", "target": colour, "image": out}
    target_names = sorted({coco.names[int(a["category_id"])] for _, a in others}) or \
        sorted(set(coco.names.values()) - {name})
    target = str(rng.choice(target_names)) if target_names else "object"
    drawn = inpainter.replace(image, mask, target)
    if drawn is not None:
        return {"kind": "substitution", "target": target, "method": inpainter.name, "image": drawn}
    pick = [(i, a) for i, a in others if coco.names[int(a["category_id"])] == target]
    di, da = pick[int(rng.integers(len(pick)))]
    cleared = inpainter.remove(image, mask, name)
    return {"kind": "substitution", "target": target, "method": "copy-paste",
            "image": paste(cleared, mask, coco.load(di), coco.mask(da))}
