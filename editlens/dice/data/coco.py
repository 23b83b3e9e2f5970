"""Read a COCO/LVIS-format detection dataset: images, categories and
instance annotations (boxes, and masks from polygons or RLE)."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from editlens.core.io import read_json
from editlens.errors import InputError


@dataclass
class CocoImage:
    id: int
    path: Path
    width: int
    height: int


class CocoSet:
    """Images with their non-crowd annotations; ``names`` maps category id -> name."""

    def __init__(self, annotations: str | Path, images: str | Path) -> None:
        ann_path, img_root = Path(annotations), Path(images)
        if not ann_path.is_file():
            raise InputError(f"{ann_path}: annotation file not found")
        if not img_root.is_dir():
            raise InputError(f"{img_root}: image folder not found")
        data = read_json(ann_path, "COCO annotations")
        if not isinstance(data, dict):
            raise InputError(f"{ann_path}: a COCO instances file is a JSON object, got {type(data).__name__}")
        missing = [k for k in ("images", "annotations", "categories") if k not in data]
        if missing:
            raise InputError(f"{ann_path}: a COCO instances file needs {', '.join(missing)}")
        self.path = ann_path
        self.names = {int(c["id"]): str(c["name"]) for c in data["categories"]}
        self.images: dict[int, CocoImage] = {}
        for im in data["images"]:
            name = im.get("file_name") or Path(str(im.get("coco_url", ""))).name
            if not name:
                raise InputError(f"{ann_path}: image {im.get('id')} has no file_name")
            self.images[int(im["id"])] = CocoImage(int(im["id"]), img_root / name, int(im["width"]), int(im["height"]))
        self.anns: dict[int, list[dict[str, Any]]] = {i: [] for i in self.images}
        for a in data["annotations"]:
            if a.get("iscrowd"):
                continue
            if int(a["image_id"]) not in self.images:
                raise InputError(f"{ann_path}: annotation {a.get('id')} names unknown image {a['image_id']}")
            if int(a["category_id"]) not in self.names:
                raise InputError(f"{ann_path}: annotation {a.get('id')} names unknown category {a['category_id']}")
            self.anns[int(a["image_id"])].append(a)
        self._coco: Any = None
        self._data = data

    def classes(self, image_id: int) -> set[str]:
        return {self.names[int(a["category_id"])] for a in self.anns[image_id]}

    def mask(self, ann: dict[str, Any]) -> np.ndarray:
        """Boolean mask of an annotation (its box when it has no segmentation)."""
        im = self.images[int(ann["image_id"])]
        if not ann.get("segmentation"):
            x, y, w, h = ann["bbox"]
            m = np.zeros((im.height, im.width), bool)
            m[int(round(y)) : int(round(y + h)), int(round(x)) : int(round(x + w))] = True
            return m
        if self._coco is None:
            from pycocotools.coco import COCO

            with contextlib.redirect_stdout(io.StringIO()):
                self._coco = COCO()
                self._coco.dataset = self._data
                self._coco.createIndex()
        return self._coco.annToMask(ann).astype(bool)

    def load(self, image_id: int) -> np.ndarray:
        from editlens.core.images import load_image

        im = self.images[image_id]
        if not im.path.is_file():
            raise InputError(f"{self.path}: image {im.id} file {im.path} not found")
        arr = load_image(str(im.path))[0]
        if arr.shape[:2] != (im.height, im.width):
            raise InputError(f"{im.path}: is {arr.shape[1]}x{arr.shape[0]}, the annotations say {im.width}x{im.height}")
        return arr


def box_norm(bbox_xywh: Any, width: int, height: int) -> list[float]:
    """COCO ``[x, y, w, h]`` in pixels -> ``[x0, y0, x1, y1]`` as fractions."""
    x, y, w, h = (float(v) for v in bbox_xywh)
    return [round(x / width, 5), round(y / height, 5), round((x + w) / width, 5), round((y + h) / height, 5)]


def box_iou(a: Any, b: Any) -> float:
    """IoU of two ``[x0, y0, x1, y1]`` boxes.

    >>> box_iou([0, 0, 2, 2], [1, 1, 3, 3])
    0.14285714285714285
    """
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
