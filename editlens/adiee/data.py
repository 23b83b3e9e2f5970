"""``editlens adiee make-data``: edits with ground truth, editing-model
outputs and multi-turn sequences -> a scored training dataset.

The dataset directory holds

* ``samples.jsonl`` – one scored sample per line; it is also an editlens
  manifest (``id, source, edited, instruction``) with ``score`` (0-1),
  ``rule``, ``kind``, ``model``, ``split`` and ``provenance``;
* ``images/<content hash>.png`` – every image once, content-addressed;
* ``val_manifest.jsonl`` / ``val_labels.jsonl`` – the held-back split as a
  manifest and as ``{id, model, human}`` labels for ``editlens meta-eval``;
* ``config.json`` (the resolved rules), ``stats.json`` and ``histogram.png``;
* ``features.jsonl`` – CLIP/DINO features already computed, so a rerun after
  an interruption encodes nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from editlens.adiee.augment import augment
from editlens.adiee.config import DataConfig
from editlens.adiee.rules import (
    Assignment,
    Thresholds,
    assign_model_output,
    input_thresholds,
    multi_turn_score,
    sample_turn_pairs,
)
from editlens.core.images import image_hash, load_image
from editlens.core.io import atomic_write, read_json
from editlens.data.jsonl import iter_jsonl
from editlens.errors import InputError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


# -- inputs ----------------------------------------------------------------------
@dataclass
class GroundTruthEdit:
    id: str
    source: Path
    reference: Path
    instruction: str
    source_caption: str | None = None
    target_caption: str | None = None


@dataclass
class ModelOutput:
    edit_id: str
    model: str
    edited: Path


@dataclass
class EditSequence:
    """Images ``I_0..I_N`` and the instructions of turns ``1..N``."""

    id: str
    images: list[Path]
    instructions: list[str]


def _resolve(value: Any, base: Path, where: str, col: str) -> Path:
    if value is None or not str(value).strip():
        raise InputError(f"{where}: missing '{col}'")
    p = Path(str(value)).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise InputError(f"{where}: {col} file not found: {p}")
    return p.resolve()


def read_edits(path: str | Path) -> list[GroundTruthEdit]:
    """Edits with ground truth. Columns: ``id, source, instruction`` and the
    ground truth as ``reference`` (or ``edited``); AURORA-style rows
    ``{input, output, instruction}`` are read too (id from the output file name)."""
    p = Path(path)
    base = p.resolve().parent
    out: list[GroundTruthEdit] = []
    seen: dict[str, int] = {}
    rows = list(iter_jsonl(p))
    if not rows:
        raise InputError(f"{p}: no rows")
    for n, row in rows:
        where = f"{p}:{n}"
        src = row.get("source", row.get("input"))
        ref = row.get("reference", row.get("edited", row.get("output")))
        sid = str(row.get("id") or Path(str(ref or "")).stem).strip()
        instruction = str(row.get("instruction") or "").strip()
        if not instruction:
            raise InputError(f"{where}: empty instruction")
        if not sid:
            raise InputError(f"{where}: missing 'id'")
        if sid in seen and not row.get("id"):
            sid = f"{sid}#{n}"  # derived ids (AURORA rows) may repeat: the line number tells them apart
        if sid in seen:
            raise InputError(f"{where}: duplicate id {sid!r} (first on line {seen[sid]})")
        seen[sid] = n
        out.append(GroundTruthEdit(sid, _resolve(src, base, where, "source"), _resolve(ref, base, where, "reference"),
                                   instruction, row.get("source_caption") or None, row.get("target_caption") or None))
    return out


def read_outputs(path: str | Path, edits: Sequence[GroundTruthEdit]) -> list[ModelOutput]:
    """Editing-model outputs: ``{edit_id, model, edited}`` per line."""
    p = Path(path)
    base = p.resolve().parent
    ids = {e.id for e in edits}
    out = []
    rows = list(iter_jsonl(p))
    if not rows:
        raise InputError(f"{p}: no rows")
    for n, row in rows:
        where = f"{p}:{n}"
        eid = str(row.get("edit_id") or "").strip()
        if eid not in ids:
            raise InputError(f"{where}: edit_id {eid!r} is not an id of the edits manifest")
        model = str(row.get("model") or "").strip()
        if not model:
            raise InputError(f"{where}: missing 'model'")
        out.append(ModelOutput(eid, model, _resolve(row.get("edited"), base, where, "edited")))
    return out


_TURN = re.compile(r"^(?P<stem>.+?)-(?:input|output(?P<k>\d+))$")


def find_sequences(folder: str | Path, edits: Sequence[GroundTruthEdit]) -> tuple[list[EditSequence], list[tuple[str, str]]]:
    """MagicBrush-style sessions: ``ID/ID-input.png, ID-output1.png ... ID-outputN.png``.

    Turn ``k``'s instruction comes from ``ID/instructions.json`` (a list), or
    else from the edit whose source is image ``k-1`` and ground truth image ``k``.
    Returns the sequences and ``(folder, reason)`` for those left out.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"{root}: multi-turn folder not found")
    by_pair = {(e.source, e.reference): e.instruction for e in edits}
    seqs, skipped = [], []
    for d in sorted(p for p in root.rglob("*") if p.is_dir()):
        frames: dict[int, Path] = {}
        for f in d.iterdir():
            m = _TURN.match(f.stem)
            if f.suffix.lower() in IMAGE_SUFFIXES and m:
                frames[int(m.group("k") or 0)] = f.resolve()
        if not frames:
            continue
        n = max(frames)
        if 0 not in frames or sorted(frames) != list(range(n + 1)):
            skipped.append((str(d), f"turn images not contiguous from input: {sorted(frames)}"))
            continue
        if n < 1:
            skipped.append((str(d), "no output turns"))
            continue
        images = [frames[k] for k in range(n + 1)]
        listed = d / "instructions.json"
        if listed.is_file():
            instructions = [str(x) for x in read_json(listed, "the turns' instructions")]
        else:
            instructions = [by_pair.get((images[k - 1], images[k]), "") for k in range(1, n + 1)]
        if len(instructions) != n or not all(s.strip() for s in instructions):
            skipped.append((str(d), "an instruction is missing for some turn"))
            continue
        seqs.append(EditSequence(d.name, images, instructions))
    return seqs, skipped


# -- candidates ------------------------------------------------------------------
@dataclass
class Candidate:
    id: str
    source: Path
    edited: Path | np.ndarray
    instruction: str
    kind: str  # ground_truth, source, augment, model, multi_turn
    model: str
    group: str  # samples of one group share a split
    score: float | None = None
    rule: str | None = None
    excluded: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    # for the model-output rules
    reference: Path | None = None
    captions: tuple[str | None, str | None] = (None, None)


class _Images:
    """Decoded images by path, kept in a small LRU (each file is read once per use burst)."""

    def __init__(self, size: int = 256) -> None:
        self._lru: OrderedDict[Path, np.ndarray] = OrderedDict()
        self.size = size

    def __call__(self, p: Path | np.ndarray) -> np.ndarray:
        if isinstance(p, np.ndarray):
            return p
        if p in self._lru:
            self._lru.move_to_end(p)
            return self._lru[p]
        arr, _ = load_image(p)
        self._lru[p] = arr
        if len(self._lru) > self.size:
            self._lru.popitem(last=False)
        return arr


class FeatureStore:
    """CLIP/DINO features per (source, edited, reference, captions), appended
    to ``features.jsonl`` as computed and reloaded on a rerun."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, dict[str, float | None]] = {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by an interruption is recomputed
                self.rows[row["key"]] = row["features"]

    def add(self, items: dict[str, dict[str, float | None]]) -> None:
        self.rows.update(items)
        with open(self.path, "a", encoding="utf-8") as fh:
            for k, v in items.items():
                fh.write(json.dumps({"key": k, "features": v}) + "\n")


def _nan_to_none(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)


def compute_features(pairs: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, str | None, str | None]],
                     clip: Any, dino: Any, batch: int = 32) -> dict[str, dict[str, float | None]]:
    """``(key, source, edited, reference, source_caption, target_caption)`` ->
    CLIP-I and DINO-I of edited vs reference, and CLIP-D of source->edited vs
    the captions (``None`` without captions or when undefined)."""
    import torch

    from editlens.metrics import functional as F

    out: dict[str, dict[str, float | None]] = {}
    for s in range(0, len(pairs), batch):
        part = pairs[s : s + batch]
        srcs = [p[1] for p in part]
        edts = [p[2] for p in part]
        refs = [p[3] for p in part]
        ce, cr = clip.encode_images(edts), clip.encode_images(refs)
        de, dr = dino.encode_images(edts), dino.encode_images(refs)
        clip_i = F.cosine(ce, cr).tolist()
        dino_i = F.cosine(de, dr).tolist()
        clip_d: list[float | None] = [None] * len(part)
        with_caps = [i for i, p in enumerate(part) if p[4] and p[5]]
        if with_caps:
            cs = clip.encode_images([srcs[i] for i in with_caps])
            ts = clip.encode_texts([part[i][4] for i in with_caps])
            tt = clip.encode_texts([part[i][5] for i in with_caps])
            vals = F.clip_directional(cs, ce[torch.tensor(with_caps)], ts, tt).tolist()
            for i, v in zip(with_caps, vals):
                clip_d[i] = _nan_to_none(v)
        for i, p in enumerate(part):
            out[p[0]] = {"clip_i": _nan_to_none(clip_i[i]), "dino_i": _nan_to_none(dino_i[i]), "clip_d": clip_d[i]}
    return out


def _key(*parts: Any) -> str:
    return hashlib.blake2b(json.dumps([str(p) for p in parts]).encode(), digest_size=16).hexdigest()


def _split(group: str, seed: int, val_fraction: float) -> str:
    h = int.from_bytes(hashlib.blake2b(f"{seed}:{group}".encode(), digest_size=8).digest(), "big")
    return "val" if h / 2**64 < val_fraction else "train"


@dataclass
class MakeDataResult:
    out_dir: Path
    stats: dict[str, Any]


def make_dataset(edits_path: str | Path, out_dir: str | Path, cfg: DataConfig | None = None,
                 outputs_path: str | Path | None = None, sessions: str | Path | None = None,
                 encoders: Callable[[], tuple[Any, Any]] | None = None, progress: bool = True) -> MakeDataResult:
    """Create the dataset (see the module docstring).

    ``encoders`` returns the CLIP and DINO encoders (see
    :func:`editlens.models.encoders.get_encoder`); it is called only when
    editing-model outputs need features.
    """
    from tqdm import tqdm

    cfg = cfg or DataConfig()
    cfg.validate()
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    edits = read_edits(edits_path)
    outputs = read_outputs(outputs_path, edits) if outputs_path else []
    seqs, seq_skipped = find_sequences(sessions, edits) if sessions and cfg.multi_turn.enabled else ([], [])
    seq_of: dict[Path, str] = {img: s.id for s in seqs for img in s.images}
    group = lambda p: seq_of.get(p, str(p))  # noqa: E731 - one sequence = one split group

    cands: list[Candidate] = []
    by_id = {e.id: e for e in edits}
    r = cfg.rules
    for e in edits:
        g = group(e.source)
        prov = {"edit_id": e.id, "source_file": str(e.source), "reference_file": str(e.reference)}
        if r.ground_truth:
            cands.append(Candidate(f"{e.id}:gt", e.source, e.reference, e.instruction, "ground_truth", "ground_truth",
                                   g, 1.0, "ground_truth", provenance=prov))
        if r.source_as_output:
            cands.append(Candidate(f"{e.id}:source", e.source, e.source, e.instruction, "source", "source", g, 0.0,
                                   "source_as_output", provenance=prov))
        for kind in cfg.augment.kinds:
            cands.append(Candidate(f"{e.id}:aug-{kind}", e.source, e.source, e.instruction, "augment",
                                   f"augment:{kind}", g, 0.0, "augmented_source",
                                   provenance={**prov, "augmentation": kind}))
    for n, o in enumerate(outputs):
        e = by_id[o.edit_id]
        cands.append(Candidate(f"{o.edit_id}:{o.model}:{n}", e.source, o.edited, e.instruction, "model", o.model,
                               group(e.source), provenance={"edit_id": e.id, "edited_file": str(o.edited)},
                               reference=e.reference, captions=(e.source_caption, e.target_caption)))
    for s in seqs:
        for i, j in sample_turn_pairs(len(s.instructions), cfg.multi_turn.pairs_per_sequence, rng):
            instr = cfg.multi_turn.join.join(t.strip() for t in s.instructions[i:j])
            for k in range(len(s.images)):
                cands.append(Candidate(f"{s.id}:mt{i}-{j}:k{k}", s.images[i], s.images[k], instr, "multi_turn",
                                       "multi_turn", s.id, multi_turn_score(k, i, j), "multi_turn",
                                       provenance={"sequence": s.id, "i": i, "j": j, "k": k,
                                                   "edited_file": str(s.images[k])}))

    images = _Images()
    thresholds: Thresholds | None = None
    model_cands = [c for c in cands if c.kind == "model"]
    if model_cands:
        if encoders is None:
            raise InputError("editing-model outputs need CLIP and DINO encoders (pass --model clip=DIR --model dino=DIR)")
        clip, dino = encoders()
        store = FeatureStore(out / "features.jsonl")
        want: list[tuple[str, Path, Path, Path, str | None, str | None]] = []
        for e in edits:  # the input images' own features against the ground truth
            want.append((_key("input", e.source, e.reference), e.source, e.source, e.reference, None, None))
        for c in model_cands:
            assert c.reference is not None and isinstance(c.edited, Path)
            want.append((_key("output", c.source, c.edited, c.reference, *c.captions), c.source, c.edited,
                         c.reference, *c.captions))
        todo = [w for w in dict((w[0], w) for w in want).values() if w[0] not in store.rows]
        step = 32
        for s in tqdm(range(0, len(todo), step), desc="features", disable=not progress, unit="batch"):
            part = todo[s : s + step]
            store.add(compute_features([(k, images(a), images(b), images(c), d, f) for k, a, b, c, d, f in part],
                                       clip, dino))
        inputs = [store.rows[_key("input", e.source, e.reference)] for e in edits]
        thresholds = input_thresholds([f["clip_i"] for f in inputs], [f["dino_i"] for f in inputs], r.percentile)
        for c in model_cands:
            f = store.rows[_key("output", c.source, c.edited, c.reference, *c.captions)]
            a: Assignment = assign_model_output(c.model, f["clip_d"], f["clip_i"], f["dino_i"], thresholds, r)
            c.score, c.rule, c.excluded = a.score, a.rule, a.excluded
            c.provenance["features"] = f

    rows: list[Any] = []
    excluded: Counter[str] = Counter()
    for c in tqdm(cands, desc="images", disable=not progress, unit="sample"):
        if c.score is None:
            excluded[c.excluded or "unscored"] += 1
            continue
        if c.kind == "augment":
            kind = c.provenance["augmentation"]
            local = np.random.default_rng([cfg.seed, int(_key(c.id)[:8], 16)])  # per-sample seed: order-independent
            edited = _store_image(out, augment(images(c.source), kind, local, cfg.augment))
        else:
            assert isinstance(c.edited, Path)
            edited = _store_file(out, c.edited)
        rows.append({"id": c.id, "source": _store_file(out, c.source), "edited": edited,
                     "instruction": c.instruction, "score": c.score, "rule": c.rule, "kind": c.kind, "model": c.model,
                     "split": _split(c.group, cfg.seed, cfg.val_fraction), "provenance": c.provenance})

    stats = dataset_stats(rows, excluded, seq_skipped, thresholds, len(seqs))
    _write_jsonl(out / "samples.jsonl", rows)
    val = [x for x in rows if x["split"] == "val"]
    _write_jsonl(out / "val_manifest.jsonl", [{k: x[k] for k in ("id", "source", "edited", "instruction", "model")}
                                              for x in val])
    _write_jsonl(out / "val_labels.jsonl", [{"id": x["id"], "model": x["kind"], "human": x["score"]} for x in val])
    atomic_write(out / "config.json", lambda fh: json.dump(cfg.to_dict(), fh, indent=2))
    atomic_write(out / "stats.json", lambda fh: json.dump(stats, fh, indent=2))
    plot_histogram([x["score"] for x in rows], out / "histogram.png")
    return MakeDataResult(out, stats)


def _store_image(out: Path, arr: np.ndarray) -> str:
    from PIL import Image

    name = f"images/{image_hash(arr)}.png"
    target = out / name
    if not target.is_file():  # content-addressed: written once, reused on a rerun
        atomic_write(target, lambda fh: Image.fromarray(arr).save(fh, format="PNG", compress_level=1), mode="wb")
    return name


_FILE_NAMES: dict[tuple[Path, int, int], str] = {}


def _store_file(out: Path, src: Path) -> str:
    """Copy an input file as it is (no re-encoding), named by its content hash."""
    import shutil

    st = src.stat()
    key = (src, st.st_size, st.st_mtime_ns)  # a changed file is hashed again
    if key not in _FILE_NAMES:
        digest = hashlib.blake2b(src.read_bytes(), digest_size=16).hexdigest()
        _FILE_NAMES[key] = f"images/{digest}{src.suffix.lower()}"
    name = _FILE_NAMES[key]
    if not (out / name).is_file():
        atomic_write(out / name, lambda fh: shutil.copyfileobj(open(src, "rb"), fh), mode="wb")
    return name


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write(path, lambda fh: fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def dataset_stats(rows: list[dict[str, Any]], excluded: Counter, seq_skipped: list[tuple[str, str]],
                  thresholds: Thresholds | None, n_sequences: int) -> dict[str, Any]:
    scores = [r["score"] for r in rows]
    hist, edges = np.histogram(scores, bins=10, range=(0.0, 1.0)) if scores else (np.zeros(10), np.linspace(0, 1, 11))
    return {
        "samples": len(rows),
        "by_split": dict(Counter(r["split"] for r in rows)),
        "by_rule": dict(Counter(r["rule"] for r in rows)),
        "by_kind": dict(Counter(r["kind"] for r in rows)),
        "by_score": {f"{k:g}": v for k, v in sorted(Counter(round(s, 4) for s in scores).items())},
        "excluded": dict(excluded),
        "excluded_total": int(sum(excluded.values())),
        "sequences": n_sequences,
        "sequences_skipped": [{"folder": f, "reason": why} for f, why in seq_skipped],
        "thresholds": None if thresholds is None else {"clip_i": thresholds.clip_i, "dino_i": thresholds.dino_i,
                                                       "n_inputs": thresholds.n},
        "mean_score": float(np.mean(scores)) if scores else None,
        "histogram": {"edges": [float(x) for x in edges], "counts": [int(x) for x in hist]},
    }


def plot_histogram(scores: Sequence[float], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.hist(scores, bins=np.linspace(0, 1, 21).tolist(), color="#3a6ea5", edgecolor="white")
    ax.set_xlabel("score (0 fail, 0.5 partial, 1 success)")
    ax.set_ylabel("samples")
    ax.set_title(f"ADIEE training scores (n={len(scores)})")
    fig.tight_layout()
    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=100), mode="wb")
    plt.close(fig)
    return path
