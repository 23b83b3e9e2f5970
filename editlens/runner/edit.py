"""``editlens edit``: generate edited images with an editor, resumably.

:func:`generate_edits` runs an editor (:mod:`editlens.editors`) over every
edit of an input manifest, ``samples`` times each, into a folder::

    OUT/editor.json        the editor, every generation setting, its weights' hash, the seed rule, precision
    OUT/images/*.png       one image per (edit, sample), written atomically
    OUT/generations.jsonl  append-only log: one line per finished or failed image
    OUT/manifest.jsonl     the edits made: a manifest `run`, `report`, `best-of-n` and `compare` take as is

Each (edit, sample) gets its own seed, derived from the base seed, the edit's
id and the sample index (:func:`derive_seed`) and recorded: the same inputs
give the same images, and no two images share a seed by accident.

Resume: a rerun keeps every image the log says is done and whose file still
has the recorded SHA-256, and generates the rest (failed ones too, unless
``retry_failed=False``). The log is appended after the image is in place, so
a run killed at any moment (even SIGKILL) loses at most the images in flight
and never lists one twice. A rerun with other settings or weights is
refused: the folder would mix two editors.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from editlens.core.io import read_json, write_bytes, write_json
from editlens.core.safepath import inside, is_inside
from editlens.core.types import EditSample
from editlens.editors.base import STOPPED, Editor, EditOutput, EditRequest
from editlens.errors import InputError

SCHEMA = "editlens.edit/1"
SEED_RULE = "sha256(f'{base_seed}\\0{edit id}\\0{sample}')[:4] as a big-endian int, & 0x7fffffff"
#: input fields that describe the input's own edit, not the edit to make; not copied to the output rows
_REPLACED = ("edited", "model", "sample", "seed", "edit_id", "group", "prompt")


def derive_seed(base_seed: int, edit_id: str, sample: int) -> int:
    """The seed of one (edit, sample): a hash of the base seed, the edit's id and the sample index.

    >>> derive_seed(0, "e1", 0) == derive_seed(0, "e1", 0) != derive_seed(0, "e1", 1)
    True
    >>> derive_seed(0, "e1", 0)
    1878125684
    """
    digest = hashlib.sha256(f"{int(base_seed)}\0{edit_id}\0{int(sample)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


#: relative change of width / height beyond which an output's aspect ratio is another than its source's
ASPECT_TOLERANCE = 0.02


def reshaped(source: tuple[int, int], output: tuple[int, int]) -> str | None:
    """How an editor's output differs in shape from its source (``None``: same size).

    >>> reshaped((64, 48), (64, 48)) is None, reshaped((64, 48), (128, 96))
    (True, 'size 128x96 from a 64x48 source')
    >>> reshaped((64, 48), (13, 500))
    'aspect ratio 0.026 from 1.333 (13x500 from a 64x48 source)'
    """
    if tuple(source) == tuple(output):
        return None
    a_src, a_out = source[0] / max(1, source[1]), output[0] / max(1, output[1])
    if abs(a_out / a_src - 1) > ASPECT_TOLERANCE:
        return f"aspect ratio {a_out:.3f} from {a_src:.3f} ({output[0]}x{output[1]} from a {source[0]}x{source[1]} source)"
    return f"size {output[0]}x{output[1]} from a {source[0]}x{source[1]} source"


def output_id(edit_id: str, sample: int, samples: int) -> str:
    """The output row's id: the edit's own id with one sample, ``ID-sK`` with several."""
    return edit_id if samples == 1 else f"{edit_id}-s{sample}"


def image_name(edit_id: str, sample: int) -> str:
    """A file name safe on every file system, unique per (edit, sample)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", edit_id)[:60].strip("._") or "edit"
    return f"{safe}-{hashlib.sha1(edit_id.encode()).hexdigest()[:8]}-s{sample}.png"


def read_edit_inputs(path: str | os.PathLike, columns: str | Mapping[str, str] | None = None,
                     **read_options: Any) -> list[EditSample]:
    """The edits of a manifest to generate: ``source`` and ``instruction`` are
    needed, ``edited`` is not (any given is ignored). Read with the same
    reader as ``editlens run`` (:func:`editlens.data.manifest.read_manifest`),
    so every input format it takes works here."""
    from editlens.data.manifest import parse_columns, read_manifest

    mapping = parse_columns(columns)
    src = mapping.get("source", "source")
    # no edited image yet: the reader's required `edited` column reads the source
    mapping = {**mapping, "source": src, "edited": src}
    return read_manifest(path, columns=mapping, **read_options).samples


@dataclass
class EditRunResult:
    """What :func:`generate_edits` did."""

    out: Path
    manifest: Path
    generated: int = 0
    reused: int = 0
    failed: int = 0
    interrupted: bool = False
    stopped_by: int | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    #: images that came back at another shape than their source: ``{edit_id, sample, source, output}`` (w, h)
    reshaped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        """What the user must know about the images made (not failures)."""
        if not self.reshaped:
            return []
        aspect = [r for r in self.reshaped if r["aspect_changed"]]
        out = []
        if aspect:
            e = aspect[0]
            out.append(f"{len(aspect)} image(s) came back at another aspect ratio than their source (e.g. "
                       f"{e['edit_id']}: {e['output'][0]}x{e['output'][1]} from {e['source'][0]}x{e['source'][1]}): "
                       "the editor crops, pads or distorts; evaluators compare them resized to the source")
        sized = [r for r in self.reshaped if not r["aspect_changed"]]
        if sized:
            e = sized[0]
            out.append(f"{len(sized)} image(s) came back at another size than their source, same aspect (e.g. "
                       f"{e['edit_id']}: {e['output'][0]}x{e['output'][1]} from {e['source'][0]}x{e['source'][1]})")
        return out

    @property
    def total(self) -> int:
        return self.generated + self.reused + self.failed


def _read_log(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The last record per (edit id, sample); a torn last line (a killed write) is ignored."""
    state: dict[tuple[str, int], dict[str, Any]] = {}
    if not path.is_file():
        return state
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
            state[(str(rec["edit_id"]), int(rec["sample"]))] = rec
        except (ValueError, KeyError, TypeError):
            continue
    return state


def _end_torn_line(path: Path) -> None:
    """A run killed mid-append leaves a line without its newline: end it, so the next record starts its own line."""
    if path.is_file() and path.stat().st_size:
        with open(path, "rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


def _append(path: Path, rec: Mapping[str, Any]) -> None:
    # one write of one line, flushed to disk before the next image starts
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _previous(path: Path) -> dict[str, Any]:
    try:
        doc = read_json(path)
    except InputError:  # none yet, or damaged: written anew
        return {}
    return doc if isinstance(doc, dict) else {}


def _check_same_editor(path: Path, record: Mapping[str, Any]) -> None:
    if not path.is_file():
        return
    try:
        old = read_json(path)
    except InputError:
        return  # unreadable: rewritten below
    diffs = []
    for key in ("editor", "seed", "shard"):
        if old.get(key) != record.get(key):
            diffs.append(f"{key} {old.get(key)!r} -> {record.get(key)!r}")
    for key in sorted(set(old.get("settings", {})) | set(record["settings"])):
        a, b = old.get("settings", {}).get(key), record["settings"].get(key)
        if a != b:
            diffs.append(f"{key} {a!r} -> {b!r}")
    if (old.get("weights") or {}).get("sha256") != (record.get("weights") or {}).get("sha256"):
        diffs.append("the weights' sha256")
    if diffs:
        raise InputError(f"{path.parent} holds edits made with other settings ({'; '.join(diffs)}); "
                         "use a new --out, or rerun with the same settings to resume")


def portable_path(value: Any, base: str | os.PathLike) -> Any:
    """An image reference as a manifest in ``base`` records it: a file path (or the file of a
    ``FILE#row=N&column=C`` table cell) relative to ``base``, so that the folder can move with
    its inputs (``../data/x.png``); anything else (an in-memory image) as its text.

    >>> portable_path("/data/bench/a.png", "/data/out"), portable_path("/d/t.parquet#row=2&column=img", "/d/o")
    ('../bench/a.png', '../t.parquet#row=2&column=img')
    """
    from editlens.core.embedded import TableImage, parse_ref

    ref = value if isinstance(value, TableImage) else parse_ref(value)
    if ref is not None:
        from dataclasses import replace

        return replace(ref, file=os.path.relpath(os.path.abspath(ref.file), os.path.abspath(base))).uri()
    if isinstance(value, (str, os.PathLike)):
        return os.path.relpath(os.path.abspath(os.fspath(value)), os.path.abspath(base))
    return str(value)


def absolute_path(value: Any, base: str | os.PathLike) -> str:
    """The inverse of :func:`portable_path`: a recorded reference made absolute against ``base``."""
    from dataclasses import replace

    from editlens.core.embedded import parse_ref

    ref = parse_ref(value)
    if ref is not None:
        return replace(ref, file=os.path.abspath(os.path.join(base, ref.file))).uri()
    return os.path.abspath(os.path.join(base, os.fspath(value)))


def _row(s: EditSample, k: int, samples: int, rec: Mapping[str, Any], editor_name: str,
         base: str | os.PathLike | None = None) -> dict[str, Any]:
    where = (lambda v: portable_path(v, base)) if base is not None else str  # noqa: E731
    row: dict[str, Any] = {"id": output_id(s.id, k, samples), "source": where(s.source), "edited": rec["edited"],
                           "instruction": s.instruction}
    if s.reference is not None:
        row["reference"] = where(s.reference)
    for key in ("source_caption", "target_caption"):
        if getattr(s, key) is not None:
            row[key] = getattr(s, key)
    row.update({k2: v for k2, v in s.metadata.items() if k2 not in _REPLACED})
    row.update({"model": editor_name, "sample": k, "seed": rec["seed"], "edit_id": s.id, "group": s.id})
    if rec.get("prompt"):
        row["prompt"] = rec["prompt"]
    return row


def write_output_manifest(out: Path, inputs: Sequence[EditSample], samples: int, editor_name: str,
                          state: Mapping[tuple[str, int], Mapping[str, Any]]) -> Path:
    """``OUT/manifest.jsonl``: the done images, in input order (atomically)."""
    from editlens.core.io import write_jsonl

    rows = [_row(s, k, samples, state[(s.id, k)], editor_name, out) for s in inputs for k in range(samples)
            if state.get((s.id, k), {}).get("status") == "done"]
    return write_jsonl(out / "manifest.jsonl", rows, ensure_ascii=False, default=str)


def _source_image(s: EditSample) -> Any:
    from PIL import Image

    from editlens.core.images import ImageLoadOptions, load_image

    image, _ = load_image(s.source, ImageLoadOptions(), name=str(s.source))
    return image if isinstance(image, Image.Image) else Image.fromarray(image)


def open_editor(spec: str, options: Mapping[str, Any] | None = None, *, executor: str = "local",
                address: str | None = None, workers: int | None = None, gpus_per_worker: float = 0.0) -> Any:
    """The editor ``spec`` with ``options``: in this process (``executor="local"``), or one copy per
    Ray worker (``"ray"``: ``workers`` of them, each with ``gpus_per_worker`` GPUs, on the cluster at
    ``address`` or a local Ray) as a :class:`~editlens.runner.executors.RayEditors`. Close it after use."""
    if executor == "local":
        from editlens.editors import create_editor

        return create_editor(spec, **dict(options or {}))
    if executor != "ray":
        raise InputError(f"--executor {executor!r}: local or ray")
    from editlens.runner.executors import RayEditors

    return RayEditors(spec, dict(options or {}), address=address, num_workers=workers,
                      gpus_per_worker=gpus_per_worker)


def generate_edits(
    inputs: str | os.PathLike | Sequence[EditSample],
    editor: str | Editor,
    out: str | os.PathLike,
    *,
    samples: int = 1,
    seed: int = 0,
    batch_size: int | None = None,
    editor_options: Mapping[str, Any] | None = None,
    retry_failed: bool = True,
    progress: bool = True,
    wait: bool = False,
    columns: str | Mapping[str, str] | None = None,
    command: Sequence[str] | None = None,
    manifest_options: Mapping[str, Any] | None = None,
    shard: Any = None,
    limit: int | None = None,
) -> EditRunResult:
    """Generate ``samples`` edited images per edit of ``inputs`` with ``editor`` into ``out``.

    Args:
        inputs: a manifest path (any format ``editlens run`` reads; ``edited``
            not needed) or ``EditSample``s (their ``edited`` is ignored).
        editor: an ``--editor`` spec string (:func:`editlens.editors.create_editor`,
            with ``editor_options``) or an :class:`~editlens.editors.Editor`.
        out: the output folder (created; rerun to resume).
        samples: images per edit, each with its own derived seed.
        seed: the base seed of :func:`derive_seed`.
        batch_size: images per editor call (default: the editor's own).
        retry_failed: on a rerun, generate images that failed before again.
        wait: if another process holds ``out``, queue behind it instead of failing.
        columns: column mapping for a manifest path (as ``--columns``).
        command: the command line, recorded.
        manifest_options: more options of the manifest reader for a path
            (``encoding``, ``delimiter``, ``split``, ``image_root``...).
        shard: a :class:`~editlens.runner.shards.Shard` (or ``"I/N"``): make only the
            edits whose id falls in it (``OUT/shard.json`` records it; ``editlens runs
            merge`` joins the shards' folders).

    ``editor`` may be spread over Ray workers (:class:`~editlens.runner.executors.RayEditors`):
    the driver keeps the log, images and manifest exactly as with one process.
        limit: only the first ``limit`` edits of the input.

    Returns an :class:`EditRunResult`; ``OUT/manifest.jsonl`` lists the images made so far.
    """
    from editlens.runner.lock import RunLock

    if samples < 1:
        raise InputError(f"samples must be at least 1, got {samples}")
    input_path, edits = _edits_to_make(inputs, columns, manifest_options, limit)
    part, shard_doc, edits = _shard_part(shard, edits, samples)
    if isinstance(editor, str):
        from editlens.editors import create_editor

        editor = create_editor(editor, **dict(editor_options or {}))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "images").mkdir(exist_ok=True)
    with RunLock(out, wait=wait):
        record = {"schema": SCHEMA, "editor": editor.name, "spec": editor.spec.to_dict() if getattr(editor, "spec", None) else None,
                  "settings": editor.settings(), "weights": editor.weights(), "seed": int(seed),
                  "seed_rule": SEED_RULE, **({"shard": str(part)} if part else {})}
        _check_same_editor(out / "editor.json", record)
        job = _EditJob(out, editor, edits, samples, int(seed))
        job.plan(retry_failed)
        runtime = editor.runtime() if job.todo else _previous(out / "editor.json").get("runtime", {})
        write_json(out / "editor.json", {**record, "runtime": runtime, "samples": samples, "input": input_path,
                                         "command": list(command) if command else None,
                                         "python": sys.version.split()[0]}, default=str)
        if shard_doc is not None:
            write_json(out / "shard.json", shard_doc)
        # per image: a resume on other hardware may change the dtype, and the log says which image used which
        job.made_with = {k: (runtime.get("precision") or {}).get(k) for k in ("device", "dtype")
                         if (runtime.get("precision") or {}).get(k)}
        job.run(max(1, int(batch_size or editor.batch_size or 1)), progress)
    return job.result


def _edits_to_make(inputs: str | os.PathLike | Sequence[EditSample], columns: str | Mapping[str, str] | None,
                   manifest_options: Mapping[str, Any] | None,
                   limit: int | None) -> tuple[str | None, list[EditSample]]:
    """The input manifest's path (``None`` for samples given in memory) and its
    edits (the first ``limit``); refuses no edits and an id given twice."""
    if isinstance(inputs, (str, os.PathLike)):
        input_path: str | None = str(Path(inputs).resolve())
        edits = read_edit_inputs(inputs, columns, **{k: v for k, v in (manifest_options or {}).items()
                                                     if v is not None})
    else:
        input_path, edits = None, list(inputs)
    if limit is not None:
        edits = edits[:limit]
    if not edits:
        raise InputError("no edits to generate")
    seen: set[str] = set()
    for s in edits:
        if s.id in seen:
            raise InputError(f"edit id {s.id!r} appears twice; ids key the generated images")
        seen.add(s.id)
    return input_path, edits


def _shard_part(shard: Any, edits: list[EditSample],
                samples: int) -> tuple[Any, dict[str, Any] | None, list[EditSample]]:
    """The shard asked for (``None``: all), the record ``OUT/shard.json`` keeps and the shard's edits."""
    from editlens.runner.shards import Shard, ids_digest, parse_shard, shard_record

    part = shard if isinstance(shard, Shard) or shard is None else parse_shard(str(shard))
    if part is None:
        return None, None, edits
    shard_doc = shard_record(part, [s.id for s in edits],
                             ids_digest([(s.id, s.source, s.instruction) for s in edits]), "edit",
                             samples=samples)
    return part, shard_doc, part.select(edits, lambda s: s.id)


class _EditJob:
    """One ``generate_edits`` run in its locked folder: the log's state, the
    images still to make, and what happened to each (:class:`EditRunResult`)."""

    def __init__(self, out: Path, editor: Editor, edits: list[EditSample], samples: int, seed: int) -> None:
        self.out, self.editor, self.edits, self.samples, self.seed = out, editor, edits, samples, seed
        self.log = out / "generations.jsonl"
        self.state = _read_log(self.log)
        _end_torn_line(self.log)
        self.todo: list[tuple[EditSample, int]] = []
        self.result = EditRunResult(out, out / "manifest.jsonl")
        self.made_with: dict[str, Any] = {}
        self.bar: Any = None

    def plan(self, retry_failed: bool) -> None:
        """Images done before (the log says so and the file still has its hash) are kept,
        failed ones kept unless ``retry_failed``; the rest is to do."""
        for s in self.edits:
            for k in range(self.samples):
                rec = self.state.get((s.id, k))
                if rec and rec.get("status") == "done" and is_inside(self.out, str(rec.get("edited") or "")) \
                        and _file_sha256(self.out / rec["edited"]) == rec.get("sha256"):  # a log naming a file elsewhere: remade
                    self.result.reused += 1
                elif rec and rec.get("status") == "failed" and not retry_failed:
                    self.result.failed += 1
                else:
                    self.todo.append((s, k))

    def run(self, size: int, progress: bool) -> None:
        """Makes the images to do, ``size`` per editor call; a signal stops cleanly
        (the images in flight are not counted), and the manifest is rewritten after every batch."""
        from editlens.runner.run import _NoBar, _StopFlag

        editor = self.editor
        self.bar = _NoBar()
        try:
            with _StopFlag() as stop:
                editor.stop_requested = lambda: stop.set  # an editor that can stop midway does, on a signal
                if progress and self.todo:  # shown once a signal is caught: from here on, Ctrl-C stops cleanly
                    from tqdm.auto import tqdm

                    self.bar = tqdm(total=len(self.todo), unit="image", desc=f"editing ({editor.name})",
                                    dynamic_ncols=True)
                run_batches = getattr(editor, "edit_batches", None) or functools.partial(Editor.edit_batches, editor)
                for requests, outputs, elapsed in run_batches(self.batches(stop, size)):
                    if len(outputs) != len(requests):  # a broken editor: no image may go to the wrong edit
                        why = f"the editor returned {len(outputs)} outputs for {len(requests)} requests"
                        outputs = [EditOutput(error=why) for _ in requests]
                    seconds = round(elapsed / max(1, len(requests)), 4)
                    for r, o in zip(requests, outputs, strict=True):
                        if o.image is None and o.error == STOPPED:  # cut short by the signal: not made, not failed
                            self.result.interrupted, self.result.stopped_by = True, stop.signum
                            continue
                        self.keep(r, o, seconds)
                    write_output_manifest(self.out, self.edits, self.samples, editor.name, self.state)
                    self.bar.update(len(requests))
        finally:
            editor.stop_requested = None
            self.bar.close()
            write_output_manifest(self.out, self.edits, self.samples, editor.name, self.state)

    def batches(self, stop: Any, size: int) -> Iterator[list[EditRequest]]:
        """The requests, one batch at a time, read as the editor asks for them (a source that
        cannot be read fails its images here); none after a stop signal."""
        for start in range(0, len(self.todo), size):
            if stop.set:
                self.result.interrupted, self.result.stopped_by = True, stop.signum
                return
            requests: list[EditRequest] = []
            for s, k in self.todo[start : start + size]:
                try:
                    image = _source_image(s)
                except InputError as exc:  # this edit fails; the others go on
                    self.fail({"edit_id": s.id, "sample": k, "seed": derive_seed(self.seed, s.id, k),
                               "status": "failed", "error": str(exc)})
                    self.bar.update(1)
                    continue
                requests.append(EditRequest(s.id, k, image, s.instruction, derive_seed(self.seed, s.id, k),
                                            dict(s.metadata)))
            if requests:
                yield requests

    def fail(self, rec: dict[str, Any]) -> None:
        self.result.failed += 1
        self.result.failures.append(rec)
        self.logged(rec)

    def logged(self, rec: dict[str, Any]) -> None:
        """Appends ``rec`` to the log (after its image is in place) and to the state."""
        _append(self.log, rec)
        self.state[(rec["edit_id"], rec["sample"])] = rec

    def keep(self, r: EditRequest, o: EditOutput, seconds: float) -> None:
        """Writes one output's image (atomically) and its log line; a missing image is a failure."""
        rec = {"edit_id": r.id, "sample": r.sample, "seed": r.seed, "seconds": seconds, **self.made_with}
        if o.image is None:
            rec.update(status="failed", error=o.error or "no image")
            self.fail(rec)
            return
        buf = io.BytesIO()
        o.image.save(buf, format="PNG")
        rel = f"images/{image_name(r.id, r.sample)}"
        write_bytes(self.out / rel, buf.getvalue())
        rec.update(status="done", edited=rel, sha256=hashlib.sha256(buf.getvalue()).hexdigest(),
                   size=list(o.image.size), prompt=o.prompt, **({"details": o.details} if o.details else {}))
        self.result.generated += 1
        shape = reshaped(r.source.size, o.image.size)
        if shape is not None:  # said, per image and in the summary: never passed silently
            rec["shape_note"] = shape
            self.result.reshaped.append({"edit_id": r.id, "sample": r.sample, "source": list(r.source.size),
                                         "output": list(o.image.size), "aspect_changed": shape.startswith("aspect")})
        self.logged(rec)


def edits_manifest_rows(out: str | os.PathLike) -> Iterable[dict[str, Any]]:
    """The rows of a finished ``editlens edit`` folder's manifest."""
    from editlens.data.jsonl import iter_jsonl

    for _, row in iter_jsonl(Path(out) / "manifest.jsonl"):
        yield row


def write_pairs(folder_a: str | os.PathLike, folder_b: str | os.PathLike, out: str | os.PathLike) -> tuple[Path, int]:
    """Pair the images two ``editlens edit`` folders made of the same edits
    (same edit id and sample) into a ``--pairs`` file for ``editlens compare``
    (``{id, source, edited_a, edited_b, instruction, model_a, model_b}``;
    paths absolute). Returns the file and the number of pairs; edits only one
    folder has are left out."""
    from editlens.core.io import write_jsonl
    from editlens.data.jsonl import iter_jsonl

    def done(folder: Path) -> dict[tuple[str, int], dict[str, Any]]:
        rows = {}
        for _, row in iter_jsonl(folder / "manifest.jsonl", missing_hint=" (is it an `editlens edit` folder?)"):
            row["edited"] = str(inside(folder, str(row["edited"]), what=f"{folder / 'manifest.jsonl'}: edited").resolve())
            row["source"] = absolute_path(row["source"], folder)
            rows[(str(row.get("edit_id", row["id"])), int(row.get("sample", 0)))] = row
        return rows

    a, b = done(Path(folder_a)), done(Path(folder_b))
    pairs = []
    for key in a:
        if key in b:
            ra, rb = a[key], b[key]
            if (ra["source"], ra["instruction"]) != (rb["source"], rb["instruction"]):
                raise InputError(f"edit {key[0]!r} has another source or instruction in {folder_b} than in "
                                 f"{folder_a}: the folders were made from different inputs")
            pairs.append({"id": ra["id"], "source": ra["source"], "edited_a": ra["edited"], "edited_b": rb["edited"],
                          "instruction": ra["instruction"], "model_a": ra.get("model"), "model_b": rb.get("model")})
    if not pairs:
        raise InputError(f"{folder_a} and {folder_b} share no edits (same edit id and sample)")
    return write_jsonl(out, pairs, ensure_ascii=False), len(pairs)


def combine_edit_folders(folders: Sequence[str | os.PathLike], out: str | os.PathLike) -> tuple[Path, dict[str, int]]:
    """Several ``editlens edit`` folders (one editor each) as one manifest ``out``: every row's ``id``
    prefixed with its editor (``MODEL/ID``), ``model`` the editor, ``source``/``edited``/``reference``
    relative to ``out``'s folder (the run's folder moves with its inputs). Two folders of one editor name
    are refused, naming both. Returns the manifest and the rows per editor."""
    from editlens.core.io import write_jsonl
    from editlens.data.jsonl import iter_jsonl

    target = Path(out)
    base = target.parent
    rows: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    counts: dict[str, int] = {}
    resolved = [Path(f).resolve() for f in folders]
    twice = sorted({str(f) for f in resolved if resolved.count(f) > 1})
    if twice:
        raise InputError(f"{', '.join(twice)}: given twice; give each editor's folder once")
    for f in map(Path, folders):
        if not (f / "manifest.jsonl").is_file():
            raise InputError(f"{f}: no manifest.jsonl (is it an `editlens edit` folder?)")
        for _, row in iter_jsonl(f / "manifest.jsonl"):
            model = str(row.get("model") or f.name)
            if model in seen and seen[model] != f:
                raise InputError(f"{seen[model]} and {f} both hold edits of editor {model!r}: give each editor once "
                                 "(or rename one folder's editor with --editor-option name=OTHER when generating)")
            seen[model] = f
            new = dict(row)
            new["id"] = f"{model}/{row['id']}"
            new["model"] = model
            for col in ("source", "edited", "reference"):
                if row.get(col) not in (None, ""):
                    new[col] = portable_path(absolute_path(row[col], f), base)
            rows.append(new)
            counts[model] = counts.get(model, 0) + 1
    if not rows:
        raise InputError("no edits in " + ", ".join(map(str, folders)))
    base.mkdir(parents=True, exist_ok=True)
    return write_jsonl(target, rows, ensure_ascii=False, default=str), counts
