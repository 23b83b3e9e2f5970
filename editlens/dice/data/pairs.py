"""Stage-1 training data (paper, sec. 3.3 and supplementary A): pairs of
visually similar real images labelled with the objects that differ.

1. Every image is embedded with DINOv2 (CLS token); a nearest-neighbour index
   (scikit-learn, cosine) proposes each image's closest images; pairs with
   cosine similarity above ``min_similarity`` (paper: 0.6) are kept.
2. A pair must share at least one class and differ by fewer than
   ``max_class_diff`` classes (paper: 15).
3. Labels, first image = original, second = edited: an object only in the
   first is REMOVE, only in the second ADD; objects of the same class in both
   whose boxes (as fractions of their images) overlap with IoU >= ``match_iou``
   are EDIT (box of the second image); same-class objects left unmatched are
   REMOVE/ADD. Boxes with a side under ``min_box`` pixels are dropped first.
   Boxes are fractions of the image they are in (REMOVE: the first).
4. Optionally an open-vocabulary detector (OWLv2 through transformers)
   verifies that a REMOVE class is really absent from the second image and an
   ADD class from the first; labels it contradicts are dropped and counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from editlens.dice.data.coco import CocoSet, box_iou, box_norm
from editlens.dice.data.store import DatasetStore, difference_stats, provenance


@dataclass
class PairConfig:
    annotations: str
    images: str
    out: str
    embedder: str = "dino"
    min_similarity: float = 0.6
    neighbours: int = 5
    max_class_diff: int = 15
    match_iou: float = 0.5
    min_box: int = 16
    verify_with: str | None = None
    verify_threshold: float = 0.3
    max_pairs: int | None = None
    device: str = "auto"
    dtype: str = "auto"


def similar_pairs(embeddings: np.ndarray, neighbours: int, min_similarity: float) -> list[tuple[int, int, float]]:
    """``(i, j, cosine)`` with ``i < j`` for every pair among each row's
    ``neighbours`` nearest rows (cosine) whose similarity exceeds ``min_similarity``.

    >>> e = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    >>> [(i, j, round(s, 3)) for i, j, s in similar_pairs(e, 2, 0.6)]
    [(0, 1, 0.994)]
    """
    from sklearn.neighbors import NearestNeighbors

    n = len(embeddings)
    if n < 2:
        return []
    k = min(neighbours + 1, n)
    index = NearestNeighbors(n_neighbors=k, metric="cosine").fit(embeddings)
    dist, idx = index.kneighbors(embeddings)
    found: dict[tuple[int, int], float] = {}
    for i in range(n):
        for d, j in zip(dist[i], idx[i]):
            if j == i:
                continue
            sim = 1.0 - float(d)
            if sim > min_similarity:
                found[(min(i, int(j)), max(i, int(j)))] = sim
    return sorted((i, j, s) for (i, j), s in found.items())


def _objects(coco: CocoSet, image_id: int, min_box: int) -> list[dict[str, Any]]:
    im = coco.images[image_id]
    out = []
    for a in coco.anns[image_id]:
        x, y, w, h = a["bbox"]
        if w < min_box or h < min_box:
            continue
        out.append({"name": coco.names[int(a["category_id"])], "box": box_norm(a["bbox"], im.width, im.height)})
    return out


def label_pair(first: list[dict[str, Any]], second: list[dict[str, Any]], match_iou: float) -> list[dict[str, Any]]:
    """ADD/REMOVE/EDIT differences between two images' objects (``{"name", "box"}``).

    >>> a = [{"name": "cat", "box": [0, 0, .5, .5]}, {"name": "dog", "box": [.5, .5, 1, 1]}]
    >>> b = [{"name": "cat", "box": [0, 0, .5, .6]}, {"name": "car", "box": [.6, 0, 1, .3]}]
    >>> [(d["command"], d["object"]) for d in label_pair(a, b, 0.5)]
    [('EDIT', 'cat'), ('REMOVE', 'dog'), ('ADD', 'car')]
    """
    from scipy.optimize import linear_sum_assignment

    diffs: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    added: list[dict[str, Any]] = []
    for name in sorted({o["name"] for o in first} | {o["name"] for o in second}):
        fa = [o for o in first if o["name"] == name]
        sb = [o for o in second if o["name"] == name]
        matched_a: set[int] = set()
        matched_b: set[int] = set()
        if fa and sb:
            cost = np.array([[-box_iou(p["box"], q["box"]) for q in sb] for p in fa])
            for i, j in zip(*linear_sum_assignment(cost)):
                if -cost[i, j] >= match_iou:
                    matched_a.add(int(i))
                    matched_b.add(int(j))
                    diffs.append({"command": "EDIT", "object": name, "box": sb[j]["box"]})
        removed += [{"command": "REMOVE", "object": name, "box": o["box"]} for i, o in enumerate(fa) if i not in matched_a]
        added += [{"command": "ADD", "object": name, "box": o["box"]} for j, o in enumerate(sb) if j not in matched_b]
    return diffs + removed + added


class Verifier(Protocol):
    """Open-vocabulary check: the highest detection score of each name in an image."""

    def scores(self, image: np.ndarray, names: Sequence[str]) -> dict[str, float]: ...


class OwlV2Verifier:
    """OWLv2 (transformers) as the verification hook."""

    def __init__(self, model: str, device: str = "auto", dtype: str = "auto") -> None:
        from transformers import Owlv2ForObjectDetection, Owlv2ImageProcessorPil, Owlv2Processor

        from editlens.models.precision import decide
        from editlens.models.resolve import load_pretrained, model_reference

        mref = model_reference(model)
        prec = decide(dtype, device)
        self.device, self.dtype = prec.device, prec.torch_dtype
        self.model = load_pretrained(Owlv2ForObjectDetection, mref, dtype=self.dtype).to(self.device).eval()
        from transformers import AutoTokenizer

        self.processor = Owlv2Processor(image_processor=load_pretrained(Owlv2ImageProcessorPil, mref),
                                        tokenizer=load_pretrained(AutoTokenizer, mref))
        from editlens.judges.templates import load_template

        # the text query per class name, a template like every other wording (editlens/templates)
        self.query = load_template("detector_query")

    def scores(self, image: np.ndarray, names: Sequence[str]) -> dict[str, float]:
        import torch
        from PIL import Image

        if not names:
            return {}
        import string

        queries = [string.Template(self.query.text).substitute(object=n).strip() for n in names]
        inputs = self.processor(text=[queries], images=Image.fromarray(image),
                                return_tensors="pt", padding=True).to(self.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)  # the model's dtype (bf16 where native)
        with torch.inference_mode():
            logits = self.model(**inputs).logits[0]  # patches x queries
        best = torch.sigmoid(logits.float()).max(dim=0).values.tolist()
        return dict(zip(names, best))


def verify(diffs: list[dict[str, Any]], first: np.ndarray, second: np.ndarray, verifier: Verifier,
           threshold: float) -> tuple[list[dict[str, Any]], int]:
    """Drop REMOVE labels whose class the verifier finds in the second image,
    and ADD labels whose class it finds in the first."""
    rem = sorted({d["object"] for d in diffs if d["command"] == "REMOVE"})
    add = sorted({d["object"] for d in diffs if d["command"] == "ADD"})
    in_second = verifier.scores(second, rem)
    in_first = verifier.scores(first, add)
    kept = [d for d in diffs if not (d["command"] == "REMOVE" and in_second.get(d["object"], 0) >= threshold)
            and not (d["command"] == "ADD" and in_first.get(d["object"], 0) >= threshold)]
    return kept, len(diffs) - len(kept)


def _embeddings(coco: CocoSet, ids: list[int], store: DatasetStore, cfg: PairConfig, progress: bool) -> np.ndarray:
    """DINOv2 embeddings, cached in the dataset folder (a rerun does not recompute them)."""
    cache = store.out / "embeddings.npz"
    if cache.is_file():
        z = np.load(cache)
        if z["ids"].tolist() == ids and str(z["model"]) == cfg.embedder:
            return z["emb"]
    from editlens.models.encoders import get_encoder

    enc = get_encoder("dino", model=cfg.embedder, device=cfg.device, dtype=cfg.dtype)
    rows = []
    it = range(0, len(ids), 16)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="DINOv2 embeddings", unit="batch")
    for k in it:
        imgs = [coco.load(i) for i in ids[k : k + 16]]
        rows.append(enc.encode_images(imgs).cpu().numpy())
    emb = np.concatenate(rows) if rows else np.zeros((0, 1), np.float32)
    from editlens.core.io import atomic_write

    atomic_write(cache, lambda fh: np.savez(fh, ids=np.array(ids), emb=emb, model=np.array(cfg.embedder)), mode="wb")
    return emb


def make_pairs(cfg: PairConfig, progress: bool = True) -> dict[str, Any]:
    """Build (or resume) a stage-1 dataset folder; returns its statistics."""
    coco = CocoSet(cfg.annotations, cfg.images)
    store = DatasetStore(cfg.out)
    store.check_config(asdict(cfg), free=("max_pairs", "device", "out"))
    store.write_json("provenance.json", provenance("dice make-pairs", asdict(cfg), [cfg.annotations]))
    ids = sorted(i for i in coco.images if coco.anns[i])
    emb = _embeddings(coco, ids, store, cfg, progress)
    candidates = similar_pairs(emb, cfg.neighbours, cfg.min_similarity)
    verifier = OwlV2Verifier(cfg.verify_with, cfg.device, cfg.dtype) if cfg.verify_with else None
    counts = {"images": len(ids), "similar_pairs": len(candidates), "no_shared_class": 0, "too_many_classes": 0,
              "no_difference": 0, "labels_dropped_by_verifier": 0}
    it: Any = candidates
    if progress:
        from tqdm import tqdm

        it = tqdm(candidates, desc="pairs", unit="pair")
    for i, j, sim in it:
        if cfg.max_pairs is not None and len(store.records) >= cfg.max_pairs:
            break
        a, b = ids[i], ids[j]
        rid = f"{a}-{b}"
        if rid in store.done:
            continue
        ca, cb = coco.classes(a), coco.classes(b)
        if not ca & cb:
            counts["no_shared_class"] += 1
            continue
        if len(ca ^ cb) >= cfg.max_class_diff:
            counts["too_many_classes"] += 1
            continue
        diffs = label_pair(_objects(coco, a, cfg.min_box), _objects(coco, b, cfg.min_box), cfg.match_iou)
        if verifier is not None:
            diffs, dropped = verify(diffs, coco.load(a), coco.load(b), verifier, cfg.verify_threshold)
            counts["labels_dropped_by_verifier"] += dropped
        if not diffs:
            counts["no_difference"] += 1
            continue
        src = store.save_image(coco.load(a), f"{a}.png") if not (store.out / f"images/{a}.png").is_file() \
            else f"images/{a}.png"
        edt = store.save_image(coco.load(b), f"{b}.png") if not (store.out / f"images/{b}.png").is_file() \
            else f"images/{b}.png"
        im = coco.images[b]
        store.add({"id": rid, "source": src, "edited": edt, "width": im.width, "height": im.height,
                   "differences": diffs, "similarity": round(sim, 4),
                   "origin": {"first": str(coco.images[a].path.name), "second": str(im.path.name)}})
    stats = {**difference_stats(store.records), "this_run": counts}
    store.write_json("stats.json", stats)
    return stats


def load_owlv2(ref: Any, precision: Any, quantization: str, models: dict[str, str], **options: Any) -> OwlV2Verifier:
    """The ``owlv2`` kind's loader (:func:`editlens.models.loader.load_model`)."""
    return OwlV2Verifier(ref.ref, precision.device, precision.dtype)
