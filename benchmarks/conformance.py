"""Conformance: editlens' benchmark figures against the owners' own scoring code.

    python benchmarks/conformance.py --clone DIR NAME [--out DIR] [--seed N]

NAME is gedit, imgedit, imgedit-uge, rise, kris, magicbrush, magicbrush-multiturn
or emu-edit; DIR is your clone of the owners' repository (Step1X-Edit, ImgEdit,
RISEBench, Kris_Bench; MagicBrush for the last three, whose L1/L2 are checked
with its ``evaluation/image_eval.py`` run by ``--owner-python``, a Python with
torchvision, clip and pyiqa; no judge there, and steps 2-3 are a run of the
model-free metrics on edits of other sizes than the ground truth, half JPEG). The script

1. builds a tiny dataset in the benchmark's published layout from editlens'
   bundled sample photographs (``editlens/samples/images``, AURORA), with two
   "models": modelA shows the sample's real edit, modelB the source brightened
   and resized (its size differs from the source's); one modelB output missing;
2. serves a deterministic fake judge on 127.0.0.1 that answers each question in
   the owner's format, its scores drawn from a hash of the request (text and
   images), with a share of odd but real-world answer forms: fenced JSON,
   ``||V^=^V||`` delimiters, bare ``[a, b]``, prose without a score, markdown-bold
   ``**Name:** N`` lines, two score lines where three are asked, "4/5", plain and
   bold "Final Score" lines and answers without one, KRIS' "I would rate this
   4/5", ``name score: N`` lines, null scores and prose with a lone digit;
3. runs ``editlens bench run NAME --prompts-from DIR`` (the clone's prompts, or
   ``--prompts-from`` another folder: the prompts decide what is asked, not how
   an answer is read) at the release the clone's scoring file is;
4. runs ``editlens bench verify`` against the clone's scoring code, prints the
   table and exits 1 on any DIFFERENT figure.

``--seed`` changes every score and which answers take an odd form (data and
answers the developers never saw). Nothing of the owners' code is copied: it
runs from the clone.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import sys
import tempfile
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from PIL import Image, ImageEnhance

SAMPLES = ("cat_seat", "dragonfruit", "hydrant", "pencil_case")
NAMES = ("gedit", "imgedit", "imgedit-uge", "rise", "kris", "magicbrush", "magicbrush-multiturn", "emu-edit")
#: benchmarks scored without a judge: their model-free metrics (paper columns) are what is checked
PIXEL_METRICS = {"magicbrush": ("L1", "L2"), "magicbrush-multiturn": ("L1", "L2"), "emu-edit": ("L1",)}


# ------------------------------------------------------------------------------------------------ images


def sample_dir() -> Path:
    import editlens

    return Path(editlens.__file__).parent / "samples" / "images"


def photo(i: int, role: str) -> Image.Image:
    """Sample pair ``i % 4``'s source or edit, varied per case (crop and size) so that no two cases
    show the same picture."""
    im = Image.open(sample_dir() / f"{SAMPLES[i % len(SAMPLES)]}_{role}.png").convert("RGB")
    k = i // len(SAMPLES)
    w, h = im.size
    im = im.crop((4 * k, 3 * k, w - 2 * k, h - 5 * k))
    return im.resize((96 + 8 * (k % 3), 80 + 4 * (k % 4)), Image.BICUBIC)


def model_b(src: Image.Image) -> Image.Image:
    """modelB: the source brightened by 15 % and a few pixels smaller (its size differs from the source)."""
    out = ImageEnhance.Brightness(src).enhance(1.15)
    return out.resize((src.width - 6, src.height - 4), Image.BICUBIC)


def encode(im: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    im.save(buf, format=fmt, quality=92) if fmt == "JPEG" else im.save(buf, format=fmt)
    return buf.getvalue()


def save(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# ------------------------------------------------------------------------------------------------ datasets


def gedit_data(root: Path) -> tuple[Path, Path]:
    """GEdit-Bench's hub parquet: 11 task types x (3 EN + 2 CN) rows, every task with intersection rows in
    each language; outputs in the release's layout <model>/fullset/<task>/<lang>/<key>.png."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from editlens.bench.gedit import TASKS

    rows, edits = [], root / "edits"
    i = 0
    for task in TASKS:
        for lang, inter in (("en", True), ("en", True), ("en", False), ("cn", True), ("cn", True)):
            key = f"{task[:4]}{i:03d}"
            src = photo(i, "source")
            rows.append({"key": key, "task_type": task, "instruction": f"edit case={i} ({task}, {lang})",
                         "instruction_language": lang,
                         "input_image": {"bytes": encode(src), "path": f"{key}.png"},
                         "input_image_raw": {"bytes": encode(src.resize((src.width * 2, src.height * 2))),
                                             "path": f"{key}_raw.png"},
                         "Intersection_exist": inter})
            save(edits / "modelA" / "fullset" / task / lang / f"{key}.png", encode(photo(i, "edited")))
            if i != 7:  # one modelB output missing on purpose (an EN row outside the intersection)
                save(edits / "modelB" / "fullset" / task / lang / f"{key}.png", encode(model_b(src)))
            i += 1
    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    cols = {k: (pa.array([r[k] for r in rows], type=img) if k.startswith("input_image") else pa.array([r[k] for r in rows]))
            for k in rows[0]}
    f = root / "GEdit-Bench" / "data" / "train-00000-of-00001.parquet"
    f.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), f)
    return root / "GEdit-Bench", edits


def imgedit_data(root: Path, uge: bool) -> tuple[Path, Path]:
    """ImgEdit's Benchmark/singleturn/basic_edit.json (9 types x 2) or Benchmark/hard/UGE_edit.json (10),
    sources under the paths in 'id'; outputs <model>/<key>.png."""
    from editlens.bench.imgedit import TYPES

    folder = root / "Benchmark" / ("hard" if uge else "singleturn")
    edits = root / "edits"
    cases: dict[str, Any] = {}
    kinds = ["uge"] * 10 if uge else [t for t in TYPES for _ in range(2)]
    for i, t in enumerate(kinds):
        key = str(1000 + i)
        rel = f"{'hard' if uge else 'animal'}/{100000 + i:09d}.jpg"
        src = photo(i, "source")
        save(folder / rel, encode(src, "JPEG"))
        cases[key] = {"id": rel, "prompt": f"Edit number {i}: make the {t} change."}
        if not uge:
            cases[key]["edit_type"] = t
        save(edits / "modelA" / f"{key}.png", encode(photo(i, "edited")))
        if i != 3:
            save(edits / "modelB" / f"{key}.png", encode(model_b(src)))
    (folder / ("UGE_edit.json" if uge else "basic_edit.json")).write_text(json.dumps(cases, indent=2))
    return folder, edits


#: (category, subtask, fields) of the tiny RISEBench: every branch of the release's eval_vanilla
RISE_CASES = [
    ("temporal_reasoning", "Life Progression", {"reference": "an old dog"}),
    ("temporal_reasoning", "Material Progression", {"reference": "rust", "reasoning_img": "r"}),
    ("temporal_reasoning", "Environmental Cycles", {"reference": "snow", "consistency_free": True}),
    ("causal_reasoning", "State Transition", {"reference": "a puddle"}),
    ("causal_reasoning", "Structural Deformation", {"reference": "a dent", "reasoning_img": "r"}),
    ("causal_reasoning", "Physics Manifestation", {"reference": "a splash", "consistency_free": True}),
    ("spatial_reasoning", "Object Arrangement", {"reference": "sorted by size"}),
    ("spatial_reasoning", "Component Assembly", {"reference_img": "ref"}),
    ("spatial_reasoning", "Viewpoint Generation", {"reference": "top view", "reasoning_img": "r"}),
    ("spatial_reasoning", "Layout Reasoning", {"reference": "a grid", "consistency_free": True}),
    ("logical_reasoning", "Puzzle Solving", {"reference_txt": "the path goes right"}),
    ("logical_reasoning", "Pattern Prediction", {"reference_img": "ref"}),
    ("logical_reasoning", "Mathematical Derivation", {"reference_img": "ref"}),
]


def rise_data(root: Path) -> tuple[Path, Path]:
    """RISEBench's data_total.json (HF full-set schema) and outputs <model>/images/<category>/<index>.png."""
    base, edits = root / "RISEBench", root / "edits"
    cases = []
    for i, (cat, sub, fields) in enumerate(RISE_CASES):
        index = f"{cat}_{i + 1}"
        img = f"{cat}_images/{i + 1}.png"
        src = photo(i, "source")
        save(base / img, encode(src))
        case: dict[str, Any] = {"index": index, "category": cat, "subtask": sub,
                                "instruction": f"Case {i + 1}: show the outcome{' [logic]' if cat.startswith('logical') else ''}.",
                                "image": img}
        for k, v in fields.items():
            if k == "reference_img":
                case[k] = f"{cat}_images/{i + 1}_ref.png"
                save(base / case[k], encode(photo(i + 5, "edited")))
            elif k == "reasoning_img":
                case[k] = f"{cat}_images/{i + 1}_reason.png"
                save(base / case[k], encode(photo(i + 2, "source")))
            else:
                case[k] = v
        cases.append(case)
        save(edits / "modelA" / "images" / cat / f"{index}.png", encode(photo(i, "edited")))
        if i != 5:
            save(edits / "modelB" / "images" / cat / f"{index}.png", encode(model_b(src)))
    (base / "data_total.json").write_text(json.dumps(cases, indent=2))
    return base, edits


#: (category, explanation) of the tiny KRIS-Bench: categories judged by metrics_common.py and metrics_knowledge.py
KRIS_CASES = [("count_change", ""), ("color_change", ""), ("anomaly_correction", ""), ("position_movement", ""),
              ("biology", "Leaves lose chlorophyll in autumn."), ("humanities", "Lanterns are lit at the festival.")]


#: the categories judged by metrics_view_change.py, metrics_multi_element.py and
#: metrics_temporal_prediction.py: per case, its input images (frames named <clip>-<frame>)
KRIS_OWN = {"viewpoint_change": [["1.jpg"], ["2.jpg"]],
            "multi-element_composition": [["1_1.jpg", "1_2.jpg", "1_3.jpg"], ["2_1.jpg", "2_2.jpg"]],
            "temporal_prediction": [["1-1.jpg", "1-2.jpg", "1-4.jpg"], ["2-1.jpg", "2-2.jpg", "2-3.jpg"]]}


def kris_data(root: Path) -> tuple[Path, Path]:
    """KRIS_Bench/<category>/annotation.json {id: {ori_img, ins_en, explain_en}} (2 cases per category) and
    outputs in the release's results/<model>/<category>/<id>.jpg layout."""
    base, edits = root / "KRIS_Bench", root / "edits"
    i = 0
    for cat, explain in KRIS_CASES:
        ann = {}
        for k in (1, 2):
            src = photo(i, "source")
            save(base / cat / f"{k}.jpg", encode(src, "JPEG"))
            ann[str(k)] = {"ori_img": f"{k}.jpg", "ins_en": f"Case {i}: change the {cat.replace('_', ' ')}.",
                           "explain_en": explain}
            save(edits / "modelA" / cat / f"{k}.jpg", encode(photo(i, "edited"), "JPEG"))
            if i != 3:
                save(edits / "modelB" / cat / f"{k}.jpg", encode(model_b(src), "JPEG"))
            i += 1
        (base / cat / "annotation.json").write_text(json.dumps(ann, indent=2))
    # the three categories with their own scripts: a ground-truth view, several inputs, video frames
    for cat, cases in KRIS_OWN.items():
        ann = {}
        for k, names in enumerate(cases, 1):
            src = photo(i, "source")
            for j, name in enumerate(names):
                save(base / cat / name, encode(photo(i + j, "source"), "JPEG"))
            ann[str(k)] = {"ori_img": names if len(names) > 1 else names[0],
                           "ins_en": f"Case {i}: change the {cat.replace('_', ' ')}.", "explain_en": ""}
            if cat == "viewpoint_change":
                ann[str(k)]["gt_img"] = f"{k}_gt.jpg"
                save(base / cat / f"{k}_gt.jpg", encode(photo(i + 3, "edited"), "JPEG"))
            save(edits / "modelA" / cat / f"{k}.jpg", encode(photo(i, "edited"), "JPEG"))
            save(edits / "modelB" / cat / f"{k}.jpg", encode(model_b(src), "JPEG"))
            i += 1
        (base / cat / "annotation.json").write_text(json.dumps(ann, indent=2))
    return base, edits


#: MagicBrush test sessions (turns per session) of the tiny set; the ids are numbers, as published
MB_SESSIONS = {"30": 1, "139": 3, "242": 2}


def _shifted(im: Image.Image, rng: np.random.Generator) -> Image.Image:
    """An edit of another size than the ground truth (the owners resize it), its colours shifted by chance."""
    arr = np.asarray(im, dtype=np.int16) + rng.integers(-25, 26, size=3)
    out = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    return out.resize((im.width + int(rng.integers(-9, 10)), im.height + int(rng.integers(-7, 8))), Image.BICUBIC)


def _fmt(rng: np.random.Generator) -> tuple[str, str]:
    return ("JPEG", "jpg") if rng.random() < 0.5 else ("PNG", "png")


def magicbrush_data(root: Path, seed: int = 0) -> tuple[Path, Path]:
    """MagicBrush's test/edit_sessions.json {img_id: [{input, mask, output, instruction}]} with
    images/<img_id>/<img_id>-input.png, -outputN.png, -maskN.png; outputs <model>/<img_id>_<turn>.{png,jpg}.
    Edits of other sizes than the ground truth (the owners resize them), about half JPEG; ``seed`` picks the
    photographs, sizes, colour shifts and formats."""
    rng = np.random.default_rng(seed)
    base, edits = root / "test", root / "edits"
    sessions: dict[str, list[dict[str, str]]] = {}
    i = seed
    for img_id, turns in MB_SESSIONS.items():
        folder = base / "images" / img_id
        prev = photo(i, "source")
        save(folder / f"{img_id}-input.png", encode(prev))
        sessions[img_id] = []
        for t in range(1, turns + 1):
            gt = photo(i + t, "edited").resize(prev.size, Image.BICUBIC)
            save(folder / f"{img_id}-output{t}.png", encode(gt))
            save(folder / f"{img_id}-mask{t}.png", encode(Image.new("RGB", prev.size, (255, 255, 255))))
            sessions[img_id].append({"input": f"{img_id}-input.png" if t == 1 else f"{img_id}-output{t - 1}.png",
                                     "mask": f"{img_id}-mask{t}.png", "output": f"{img_id}-output{t}.png",
                                     "instruction": f"Turn {t}: change the picture."})
            fmt, ext = _fmt(rng)
            save(edits / "modelA" / f"{img_id}_{t}.{ext}", encode(_shifted(gt, rng), fmt))
            fmt, ext = _fmt(rng)
            save(edits / "modelB" / f"{img_id}_{t}.{ext}", encode(model_b(prev), fmt))
            prev = gt
        i += 4
    (base / "edit_sessions.json").write_text(json.dumps(sessions, indent=2))
    return base, edits


def emu_edit_data(root: Path, seed: int = 0) -> tuple[Path, Path]:
    """The Emu Edit test set's hub parquet (image bytes embedded, JPEG or PNG) and outputs
    <model>/<idx>.{png,jpg} of other sizes than the source; ``seed`` as for MagicBrush."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    base, edits = root / "emu_edit_test_set", root / "edits"
    rows = []
    tasks = ("background", "global", "style", "remove", "add", "local", "texture", "add")
    for i, task in enumerate(tasks):
        src = photo(i + seed, "source")
        rows.append({"image": {"bytes": encode(src, _fmt(rng)[0]), "path": f"{i}.jpg"},
                     "instruction": f"Case {i}: {task} edit.", "task": task, "input_caption": "a photo",
                     "output_caption": f"a photo, {task} edited", "idx": i, "hash": f"h{i}", "split": "test"})
        fmt, ext = _fmt(rng)
        save(edits / "modelA" / f"{i}.{ext}", encode(_shifted(photo(i + seed, "edited"), rng), fmt))
        fmt, ext = _fmt(rng)
        save(edits / "modelB" / f"{i}.{ext}", encode(model_b(src), fmt))
    (base / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), base / "data" / "test-00000-of-00001.parquet")
    return base, edits


DATASETS: dict[str, Callable[..., tuple[Path, Path]]] = {
    "gedit": gedit_data, "imgedit": lambda r: imgedit_data(r, False), "imgedit-uge": lambda r: imgedit_data(r, True),
    "rise": rise_data, "kris": kris_data, "magicbrush": magicbrush_data,
    "magicbrush-multiturn": magicbrush_data, "emu-edit": emu_edit_data}


# ------------------------------------------------------------------------------------------------ the judge


class Judge:
    """Deterministic answers in each owner's format; ``h`` (a hash of the request and the seed) picks the
    scores and, for about one answer in five, an odd form."""

    def __init__(self, name: str, seed: int) -> None:
        self.name, self.seed = name, seed
        self.forms: dict[str, int] = {}

    def answer(self, texts: list[str], images: list[str]) -> str:
        text = "\n".join(texts)
        if "Answer with one word: YES or NO." in text:  # editlens' capability probe
            return "YES"
        h = int(hashlib.sha256(json.dumps([self.seed, texts, images]).encode()).hexdigest(), 16)
        return getattr(self, self.name.replace("-", "_"))(h, text, len(images))

    def _form(self, name: str) -> None:
        self.forms[name] = self.forms.get(name, 0) + 1

    def gedit(self, h: int, text: str, n_images: int) -> str:
        a, b = h % 11, (h >> 8) % 11
        form = (h >> 16) % 10
        body = json.dumps({"reasoning": "compared the images", "score": [a, b]})
        if form == 0:
            self._form("gedit ||V^=^V|| delimiters")
            return f"Here is my evaluation.\n||V^=^V||\n{body}\n||V^=^V||"
        if form == 1:
            self._form("gedit fenced JSON")
            return f"```json\n{body}\n```"
        if form == 2:
            self._form("gedit bare [a, b]")
            return f"[{a}, {b}]"
        case = re.search(r"edit case=(\d+) ", text)
        if form in (3, 4) and case and int(case.group(1)) % 5 in (1, 4):
            # prose (no score at all) only in the second intersection row of each task and language, so that
            # every task keeps a scored row in every section (the release's average over 11 tasks is NaN else)
            self._form("gedit prose")
            return "The edit follows the request quite well and the image looks natural."
        return body

    def imgedit(self, h: int, text: str, n_images: int) -> str:
        s = [1 + (h >> (4 * k)) % 5 for k in range(3)]
        names = ("Prompt Compliance", "Visual Naturalness", "Physical & Detail Integrity")
        form = (h >> 20) % 10
        if form == 0:
            self._form("imgedit markdown-bold lines")
            return "Brief reasoning: fine.\n" + "\n".join(f"**{n}:** {v}" for n, v in zip(names, s))
        if form == 1:
            self._form("imgedit two score lines")
            return "Brief reasoning: fine.\n" + "\n".join(f"{n}: {v}" for n, v in zip(names[:2], s))
        if form == 2:
            self._form("imgedit 4/5")
            return "Brief reasoning: fine.\n" + "\n".join(f"{n}: {v}/5" for n, v in zip(names, s))
        if form == 3:
            self._form("imgedit prose")
            return "The edit is reasonable; I would call it fairly good overall."
        return "Brief reasoning: the edit was judged.\n" + "\n".join(f"{n}: {v}" for n, v in zip(names, s))

    def imgedit_uge(self, h: int, text: str, n_images: int) -> str:
        s, t = 1 + h % 5, 1 + (h >> 4) % 5
        form = (h >> 20) % 10
        if form == 0:
            self._form("uge markdown-bold line")
            return f"Brief reasoning: fine.\n**Score:** {s}"
        if form == 1:
            self._form("uge two score lines")
            return f"Brief reasoning: fine.\nScore: {s}\nScore: {t}"
        if form == 2:
            self._form("uge prose")
            return "A decent edit overall."
        return f"Brief reasoning: the edit was judged.\nScore: {s}"

    def kris(self, h: int, text: str, n_images: int) -> str:
        # the question, by the score key its prompt asks for (or the prompt's name in a stand-in clone)
        if "knowledge_score" in text or "P-dual_evaluation" in text:
            keys = ["instruction_score", "knowledge_score"]
        elif "instruction_score" in text or any(f"P-{n}" in text for n in (
                "instruction_following", "view_instruction_following", "instruction_multi", "instruction_temporal")):
            keys = ["instruction_score"]
        elif "quality_score" in text or "P-quality" in text or n_images == 1:
            keys = ["quality_score"]
        else:
            keys = ["consistency_score"]
        s = [1 + (h >> (4 * k)) % 5 for k in range(len(keys))]
        body = json.dumps({**{k: v for k, v in zip(keys, s)}, "reasoning": "compared"})
        form = (h >> 20) % 12
        if form == 0:
            self._form("kris fenced JSON")
            return f"```json\n{body}\n```"
        if form == 1:
            self._form("kris 4/5")
            return f"I would rate this {s[0]}/5."
        if form == 2:
            self._form("kris 'name score: N' line")
            return "\n".join(f"{k.replace('_', ' ')}: {v}" for k, v in zip(keys, s))
        if form == 3:
            self._form("kris prose with a lone digit")
            return f"Overall a {s[0]} in my view."
        if form == 4:
            self._form("kris prose")
            return "The edit is acceptable."
        if form == 6 and len(keys) == 2:
            self._form("kris one of two scores")
            return f"instruction score: {s[0]}\nThe knowledge shown is hard to judge."
        if form == 5:
            self._form("kris null score")
            return json.dumps({k: None for k in keys} | {"reasoning": "cannot tell"})
        return body

    def rise(self, h: int, text: str, n_images: int) -> str:
        logical = "[logic]" in text
        s = (h % 2) if logical else (5 if h % 3 == 0 else 1 + (h >> 4) % 5)
        form = (h >> 20) % 10
        if form == 0:
            self._form("rise bold Final Score")
            return f"The outcome was checked.\n**Final Score:** {s}"
        if form == 1:
            self._form("rise no Final Score")
            return f"I think this deserves a {s}."
        if form == 2 and not logical:
            self._form("rise N/5")
            return f"Reasoning: ok.\nFinal Score: {s}/5"
        return f"Reasoning: the outcome was checked.\nFinal Score: {s}"


@contextmanager
def serving(judge: Judge) -> Iterator[str]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"data": [{"id": "conformance-judge", "owned_by": "editlens"}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            texts, images = [], []
            for m in body.get("messages", []):
                content = m.get("content")
                for p in ([{"type": "text", "text": content}] if isinstance(content, str) else content or []):
                    if p.get("type") == "text":
                        texts.append(p["text"])
                    elif p.get("type") == "image_url":
                        images.append(hashlib.sha256(p["image_url"]["url"].encode()).hexdigest())
            with lock:
                text = judge.answer(texts, images)
            self._send(200, {"id": "c", "object": "chat.completion", "model": "conformance-judge",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------------------------ main


def conformance(name: str, clone: Path, out: Path, seed: int = 0, python: str | None = None,
                answers: str = "release", prompts_from: Path | None = None) -> dict[str, Any]:
    """Build, judge, run and verify one benchmark; returns ``bench verify``'s result plus the answer forms met."""
    from editlens.runner.bench import run_benchmark
    from editlens.runner.official import recognise, verify

    _, version = recognise(name, clone)  # refuses an unknown clone before any work
    data, edits = DATASETS[name](out / "data", seed) if name in PIXEL_METRICS else DATASETS[name](out / "data")
    if name in PIXEL_METRICS:  # no judge: the edits and ground truth vary with the seed instead
        run_benchmark(name, data, out / "run", edits=edits, metrics=PIXEL_METRICS[name], cache=False, n_boot=10,
                      progress=False, seed=seed)
        res = verify(out / "run", clone, python=python, keep=out / "verify")
        res["answer_forms"] = {}
        return res
    judge = Judge(name, seed)
    with serving(judge) as url:  # the release the clone's scoring file is (RISEBench has two)
        run_benchmark(name, data, out / "run", edits=edits, vlm=url, prompts_from=prompts_from or clone, cache=False,
                      n_boot=10,
                      progress=False, seed=seed, release=version.get("release"), answers=answers)
    res = verify(out / "run", clone, python=python, keep=out / "verify")
    res["answer_forms"] = judge.forms
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=NAMES)
    ap.add_argument("--clone", type=Path, required=True, help="your clone of the owners' repository")
    ap.add_argument("--out", type=Path, default=None, help="keep the dataset, run and owners' outputs here")
    ap.add_argument("--seed", type=int, default=0, help="another seed: other scores and other odd answers")
    ap.add_argument("--python", "--owner-python", dest="python", default=None, help="the Python that runs the owners' code (default: this one)")
    ap.add_argument("--answers", default="release", choices=("release", "strict"),
                    help="bench run's answer policy (strict: editlens' reader, expected to differ where the "
                         "release reads odd answers)")
    ap.add_argument("--prompts-from", type=Path, default=None,
                    help="where bench run reads the judge prompts (default: the clone); the prompts decide what is "
                         "asked, not how answers are scored")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    from editlens.errors import InputError
    from editlens.runner.official import verify_text

    with tempfile.TemporaryDirectory(prefix="editlens-conformance-") as tmp:
        out = args.out or Path(tmp)
        try:
            res = conformance(args.name, args.clone, out, args.seed, args.python, args.answers, args.prompts_from)
        except InputError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        print(verify_text(res))
        print("answer forms sent: " + ", ".join(f"{k} x{v}" for k, v in sorted(res["answer_forms"].items())))
    return 1 if res["different"] else 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
