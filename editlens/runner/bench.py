"""``editlens bench run``: score editors' outputs on a benchmark as its
paper does, through ``editlens run``'s resumable store.

1. The adapter reads the benchmark as published.
2. Each model's outputs are found under ``--edits DIR/<model>/`` where the
   adapter says they lie; a missing output is *skipped* with the paths
   looked at, never scored.
3. The judge (the benchmark's questions, :class:`~editlens.bench.judge.BenchJudge`)
   or the metric suite scores every edit into ``OUT/run/`` (resumable:
   a rerun asks only what is not done; failed requests are asked again).
4. The adapter's protocol turns the per-item rows into the paper's table,
   written as JSON, CSV, Markdown, LaTeX and an HTML report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from editlens.bench.base import BenchItem, Benchmark
from editlens.bench.table import comparison
from editlens.core.types import EditSample
from editlens.data.edit_folders import edit_folder_outputs, is_edit_folder
from editlens.errors import InputError
from editlens.runner.bench_results import BenchEstimate, BenchResult, BenchTable, GenerationStopped, write_bench_folder
from editlens.runner.bench_results import write_tables as write_tables  # its old import path (runs merge)

#: what an editor's output file may be (a file with another suffix is not taken for an output)
OUTPUT_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


@dataclass
class Located:
    samples: list[EditSample]
    items: dict[str, BenchItem]  # sample id -> item
    skipped: list[dict[str, Any]] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    stopped_by: int | None = None  # a signal stopped the generation (Ctrl-C / SIGTERM)
    notes: list[str] = field(default_factory=list)


def model_dirs(edits: Path, only: Sequence[str] | None = None,
               looks_like_outputs: Callable[[Path], bool] | None = None) -> dict[str, Path]:
    """``DIR/<model>/`` folders; ``DIR`` itself is one model's outputs when it holds
    images, or when ``looks_like_outputs(DIR)`` finds a case's output right in it."""
    if not edits.is_dir():
        raise InputError(f"--edits {edits}: not a folder (expected DIR/<model>/<outputs>)")
    subs = {p.name: p for p in sorted(edits.iterdir()) if p.is_dir() and not p.name.startswith(".")}
    if not subs or any(p.is_file() and p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp") for p in edits.iterdir()) \
            or (looks_like_outputs is not None and looks_like_outputs(edits)):
        subs = {edits.name: edits}
    if only:
        unknown = sorted(set(only) - set(subs))
        if unknown:
            raise InputError(f"--model {', '.join(unknown)}: no such folder under {edits} (it has {', '.join(subs)})")
        subs = {k: v for k, v in subs.items() if k in only}
    return subs


def locate(bench: Benchmark, items: Sequence[BenchItem], edits: Path, only: Sequence[str] | None = None) -> Located:
    """Samples for every (model, item) whose output exists; the rest skipped with the paths looked at.
    A model's folder is either the benchmark's published output layout or an ``editlens edit --bench``
    folder (its ``manifest.jsonl`` says where each case's image is)."""
    out = Located([], {})

    from editlens.core.safepath import is_inside, problem

    def one_models_folder(folder: Path) -> bool:  # e.g. --edits results/my-model for GEdit's fullset/ layout
        return is_edit_folder(folder) or any(is_inside(folder, c) and (folder / c).is_file()
                                             for it in items[:50] for c in bench.output_candidates(it))

    for model, folder in model_dirs(edits, only, one_models_folder).items():
        out.models.append(model)
        made = edit_folder_outputs(folder) if is_edit_folder(folder) else {}
        used: set[Path] = set()
        for it in items:
            cands = bench.output_candidates(it)
            sid = f"{model}/{it.id}"
            unsafe = next((why for c in cands if (why := problem(folder, c)) is not None), None)
            if unsafe is not None:  # a case id shaped like a path: never read outside the model's folder
                out.skipped.append({"id": sid, "model": model, "item": it.id, "status": "skipped",
                                    "reason": f"case id {it.id!r} names no file inside {folder}: its output path "
                                              f"{cands[0]!r} {unsafe}"})
                continue
            mine = made.get(it.id)  # an `edit --bench` folder's image, only when it lies inside the folder
            found = mine if mine is not None and mine.is_file() and mine.resolve().is_relative_to(folder.resolve()) \
                else None
            found = found or next((folder / c for c in cands if (folder / c).is_file()), None)
            if found is None:
                out.skipped.append({"id": sid, "model": model, "item": it.id, "status": "skipped",
                                    "reason": f"no output: looked for {folder / cands[0]}"
                                              + (f" (and {len(cands) - 1} other names)" if len(cands) > 1 else "")})
                continue
            meta = {**it.extra, "category": it.category, "language": it.language, "bench_item": it.id}
            out.samples.append(EditSample(sid, it.source, str(found), it.instruction,
                                          reference=it.reference,
                                          model=model, source_caption=it.source_caption,
                                          target_caption=it.target_caption, metadata=meta))
            out.items[sid] = it
            used.add(found.resolve())
        # (an `edit --bench` folder holds every sample and stage: its manifest, not its files, is the list)
        stray = [] if made else sorted(p for p in folder.rglob("*") if p.suffix.lower() in OUTPUT_SUFFIXES and p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(folder).parts)
                       and p.resolve() not in used)
        if stray:  # an output under a name no case has (a typo, another layout): said, never silently dropped
            shown = ", ".join(str(p.relative_to(folder)) for p in stray[:3])
            out.notes.append(f"{model}: {len(stray)} image(s) in {folder} match none of the {len(items)} cases read "
                             f"and are not scored ({shown}{' ...' if len(stray) > 3 else ''}); the outputs are looked "
                             f"for as {bench.spec.outputs or bench.output_candidates(items[0])[0]}")
    return out


def shape_notes(located: Located) -> list[str]:
    """Per model, the outputs whose aspect ratio is another than their case's source (read from the
    headers; an unreadable one is left to the run, which says so): never passed without a note."""
    import os

    from PIL import Image

    from editlens.core.embedded import TableImage
    from editlens.core.images import image_size
    from editlens.runner.edit import reshaped

    changed: dict[str, list[str]] = {}
    sizes: dict[str, tuple[int, int]] = {}  # a case's source, read once for all models
    for s in located.samples:
        case = located.items[s.id].id
        try:
            if case not in sizes:
                if isinstance(s.source, Image.Image):
                    sizes[case] = (int(s.source.size[0]), int(s.source.size[1]))
                elif isinstance(s.source, (str, os.PathLike, TableImage)):
                    sizes[case] = image_size(s.source)
                else:  # an array: no header to read
                    continue
            if not isinstance(s.edited, (str, os.PathLike)):
                continue
            out = image_size(s.edited)
        except (InputError, OSError, ValueError):
            continue
        shape = reshaped(sizes[case], out)
        if shape is not None and shape.startswith("aspect"):
            changed.setdefault(s.model or "", []).append(f"{case}: {shape}")
    return [f"{m}: {len(v)} output(s) have another aspect ratio than their source (e.g. {v[0]}): the editor "
            "crops, pads or distorts, and the judge sees them resized" for m, v in changed.items()]


@dataclass
class CaseGeneration:
    """What one editor made of a benchmark's cases (:func:`generate_cases`)."""

    done: dict[str, Path] = field(default_factory=dict)  # case id -> its image (sample 0)
    failures: dict[str, str | None] = field(default_factory=dict)  # case id -> why it was not made
    results: list[Any] = field(default_factory=list)  # one EditRunResult per stage
    record: dict[str, Any] = field(default_factory=dict)  # editor.json of the last stage
    notes: list[str] = field(default_factory=list)  # what the user must know about these edits


def generate_cases(items: Sequence[BenchItem], editor: Any, folder: Path, *, samples: int = 1, seed: int = 0,
                   batch_size: int | None = None, progress: bool = True,
                   command: Sequence[str] | None = None) -> CaseGeneration:
    """Make every case's edit with ``editor`` (``editlens edit``'s resumable generation,
    :func:`editlens.runner.edit.generate_edits`) into ``folder``: a case whose input is an
    earlier case's edit (``after``) is made from that edit (sample 0), stage by stage, each
    stage in ``folder/stepN/`` when there are several."""
    import json as _json

    from editlens.core.safepath import inside
    from editlens.runner.edit import edits_manifest_rows, generate_edits

    gen = CaseGeneration()
    several = [it for it in items if len(it.all_sources()) > 1]
    if several:  # an editor takes one image: say so rather than let a composition look judged fairly
        cats = ", ".join(sorted({it.category for it in several if it.category}))
        gen.notes.append(f"{len(several)} case(s) have several input images ({cats or 'no category'}); the editor "
                         "was given the first of each (editlens gives an editor one input image), the judge sees all")
    stages = _stages(items)
    for k, stage in enumerate(stages):
        where = folder / (f"step{k + 1}" if len(stages) > 1 else "")
        inputs = []
        for it in stage:
            if it.after is not None and it.after not in gen.done:  # its input was never made
                gen.failures[it.id] = f"its input (the edit of {it.after}) was not generated"
                continue
            src = gen.done[it.after] if it.after is not None else it.source
            given = {"inputs_given": 1, "inputs": len(it.all_sources())} if len(it.all_sources()) > 1 else {}
            inputs.append(EditSample(it.id, src, src, it.instruction, reference=it.reference,
                                     source_caption=it.source_caption, target_caption=it.target_caption,
                                     metadata={**it.extra, "category": it.category, "language": it.language,
                                               **given}))
        if not inputs:
            continue
        res = generate_edits(inputs, editor, where, samples=samples, seed=seed, batch_size=batch_size,
                             progress=progress, command=command)
        gen.results.append(res)
        gen.notes += [f"{getattr(editor, 'name', 'the editor')}: {n}" for n in res.notes]
        gen.record = _json.loads((where / "editor.json").read_text(encoding="utf-8"))
        gen.done.update({row["edit_id"]: inside(where, row["edited"], what=f"{where / 'manifest.jsonl'}: edited")
                         for row in edits_manifest_rows(where)
                         if int(row.get("sample") or 0) == 0})
        gen.failures.update({f["edit_id"]: f.get("error") for f in res.failures})
        if res.interrupted:
            break
    return gen


def shard_items(items: Sequence[BenchItem], shard: Any) -> list[BenchItem]:
    """The cases of ``shard`` (``"I/N"`` or a :class:`~editlens.runner.shards.Shard`; ``None``: all).
    A case made from an earlier case's edit goes with the first case of its chain, so a
    multi-turn chain is never split between shards."""
    from editlens.runner.shards import Shard, parse_shard

    part = shard if isinstance(shard, Shard) or shard is None else parse_shard(str(shard))
    if part is None:
        return list(items)
    by_id = {it.id: it for it in items}

    def root(it: BenchItem) -> str:
        seen = set()
        while it.after is not None and it.after in by_id and it.id not in seen:
            seen.add(it.id)
            it = by_id[it.after]
        return it.id

    return part.select(items, root)


def generate(items: Sequence[BenchItem], editors: Sequence[str], root: Path, *, seed: int = 0,
             editor_options: dict[str, Any] | None = None, progress: bool = True,
             command: Sequence[str] | None = None,
             where: dict[str, Any] | None = None) -> tuple[Located, dict[str, Any]]:
    """Make every case's edit with each ``--editor`` (:func:`generate_cases` into
    ``root/edits/<editor>/``, the folder ``editlens edit --bench`` can fill beforehand),
    and the samples to judge; a failed generation is a *failed* case (retried on rerun).
    ``where``: :func:`editlens.runner.edit.open_editor`'s keywords (Ray workers)."""
    from editlens.runner.edit import open_editor

    out = Located([], {})
    records: dict[str, Any] = {}
    for spec in editors:
        editor = open_editor(spec, editor_options, **(where or {}))
        name = editor.name
        while name in records:  # two editors of one name: keep both apart
            name += "+"
        try:
            gen = generate_cases(items, editor, root / "edits" / name, seed=seed, progress=progress,
                                 command=command)
        finally:
            editor.close()
        records[name] = gen.record
        out.models.append(name)
        out.notes += [f"{name}: {n}" for n in gen.notes]
        stopped = next((r.stopped_by or 2 for r in gen.results if r.interrupted), None)  # 2: SIGINT
        for it in items:
            sid = f"{name}/{it.id}"
            if it.id not in gen.done:
                why = gen.failures.get(it.id)
                out.skipped.append({"id": sid, "model": name, "item": it.id, "status": "failed",
                                    "reason": f"generation failed: {why}" if why else "not generated (stopped)"})
                continue
            out.samples.append(EditSample(sid, it.source, str(gen.done[it.id]), it.instruction, reference=it.reference,
                                          model=name, source_caption=it.source_caption,
                                          target_caption=it.target_caption,
                                          metadata={**it.extra, "category": it.category, "language": it.language,
                                                    "bench_item": it.id}))
            out.items[sid] = it
        if stopped is not None:  # the next editor would only be stopped too: what is made is kept
            out.stopped_by = stopped
            break
    return out, records


def _stages(items: Sequence[BenchItem]) -> list[list[BenchItem]]:
    """Cases in the order an editor must make them: first those edited from the benchmark's
    own input, then those whose input is an earlier case's edit (``after``), step by step."""
    ids = {it.id for it in items}
    depth: dict[str, int] = {}
    by_id = {it.id: it for it in items}

    def d(it: BenchItem, seen: tuple[str, ...] = ()) -> int:
        if it.id in depth:
            return depth[it.id]
        if it.after is None or it.after not in ids:
            depth[it.id] = 0
        elif it.after in seen:
            raise InputError(f"case {it.id!r}: its chain of inputs loops back to itself")
        else:
            depth[it.id] = d(by_id[it.after], seen + (it.id,)) + 1
        return depth[it.id]

    for it in items:
        d(it)
    return [[it for it in items if depth[it.id] == k] for k in range(max(depth.values(), default=-1) + 1)]


def _row(sid: str, model: str, item: BenchItem, status: str, scores: dict[str, Any], reason: str | None) -> dict[str, Any]:
    return {**{k: v for k, v in item.extra.items() if not isinstance(v, (bytes, bytearray))},
            "id": sid, "item": item.id, "model": model, "category": item.category, "language": item.language,
            "status": status, "scores": scores, "reason": reason}


def protocol_rows(bench: Benchmark, located: Located, items_by_id: dict[str, BenchItem],
                  store_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-item rows for the protocol from the run's stored results."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in store_rows:
        by.setdefault(r["sample_id"], {})[r["evaluator"]] = r
    rows = []
    for s in located.samples:
        item = located.items[s.id]
        res = by.get(s.id, {})
        if bench.spec.metrics:
            scores = {name: r["value"] for name, r in res.items() if r["status"] == "scored"}
            statuses = [r["status"] for r in res.values()] or ["failed"]
            status = "failed" if "failed" in statuses else ("scored" if scores else statuses[0])
            reason = "; ".join(f"{n}: {r['reason']}" for n, r in res.items() if r.get("reason")) or None
        else:
            judged: dict[str, Any] | None = next(iter(res.values()), None)
            status = judged["status"] if judged else "failed"
            scores = ((judged.get("details") or {}).get("figures") or {}) if judged and status == "scored" else {}
            reason = judged.get("reason") if judged else "not judged (the run stopped before it)"
            both = ((judged or {}).get("details") or {}).get("by_policy")
            if both and status in ("scored", "unscored"):  # both readings stored: the table's policy decides
                from editlens.bench.judge import read_differently

                mine = both[bench.answers]
                status, scores, reason = mine["status"], dict(mine["figures"] or {}), mine["reason"]
                extra_fields = {"answers": {p: {"status": v["status"], "figures": v["figures"],
                                                "readings": v["readings"], "invented": v.get("invented", 0)}
                                            for p, v in both.items()},
                                "read_differently": read_differently(both),
                                # the judge's answers as given (what an export to the owner's files writes)
                                "raw_answers": ((judged or {}).get("details") or {}).get("raw")}
                rows.append({**_row(s.id, s.model or "", item, status, scores, reason), **extra_fields})
                continue
        rows.append(_row(s.id, s.model or "", item, status, scores, reason))
    for sk in located.skipped:
        rows.append(_row(sk["id"], sk["model"], items_by_id[sk["item"]], sk.get("status", "skipped"), {},
                         sk["reason"]))
    return rows


def read_benchmark(name: str, data: str | Path, *, split: str | None = None,
                   limit: int | None = None) -> tuple[Any, list[BenchItem]]:
    """The benchmark ``name`` and its cases read from ``data`` (as published), checked:
    a folder that is not there says how to download it; two cases under one id are refused."""
    from editlens.bench.registry import get

    bench = get(name, split=split)
    if not Path(data).exists():  # the most common first error: the benchmark was never downloaded
        raise InputError(f"{data}: no such file or folder. Download {bench.spec.title} first: "
                         f"{bench.spec.download} (then pass that folder as --data; `editlens bench info {name}` "
                         "shows its layout)")
    items = bench.read(data)
    if limit is not None:
        items = items[:limit]
    if not items:
        raise InputError(f"{data}: no {bench.spec.title} cases read")
    seen: dict[str, BenchItem] = {}
    for it in items:  # two cases under one id would share one result row: refuse, naming both
        if it.id in seen:
            def said(case: BenchItem) -> str:  # a short description, never a dump of the row
                text = " ".join(str(case.instruction).split())
                return repr(text[:60] + ("..." if len(text) > 60 else ""))

            raise InputError(f"{data}: case {it.id!r} appears twice (instructions {said(seen[it.id])} and "
                             f"{said(it)}); every case needs its own id")
        seen[it.id] = it
    return bench, items


def run_benchmark(name: str, data: str | Path, out: str | Path, *, edits: str | Path | None = None,
                  editors: Sequence[str] = (), editor_options: dict[str, Any] | None = None,
                  models_only: Sequence[str] | None = None, vlm: str | None = None, vlm_model: str | None = None,
                  prompts_from: str | Path | None = None, temperature: float = 0.0, seed: int = 0,
                  max_new_tokens: int = 512, metric_models: dict[str, str] | None = None, device: str = "auto",
                  dtype: str = "auto", batch_size: int = 8, n_boot: int = 1000, limit: int | None = None,
                  split: str | None = None,
                  estimate_only: bool = False, progress: bool = True, cache: bool | str = True,
                  command: list[str] | None = None, answers: str = "release", images: str = "release",
                  release: str | None = None, metrics: Sequence[str] | None = None,
                  probe: bool = True, shard: Any = None,
                  where: dict[str, Any] | None = None, report: bool = True, http: Any = None) -> BenchResult:
    """Score the outputs under ``edits`` (or made by ``editors``, ``--editor`` specs) on
    benchmark ``name`` (files at ``data``) into ``out``.

    ``answers`` (``release``/``strict``) is how judge answers are read, ``images`` (``release``/``editlens``)
    how images are sent, ``release`` which version of the owner's scoring script the protocol follows
    (``spec.releases``), ``metrics`` the part of a metric suite to compute (its metric names or paper
    columns), ``probe=False`` skips the judge engine's start-up capability probe, ``http`` (an
    :class:`~editlens.backends.factory.HttpSettings`) how the judge's requests to an engine are fetched.

    Returns a :class:`~editlens.runner.bench_results.BenchTable` (the table, ``table.json``'s content, with
    ``exit``: 0 when every found output was scored or unscored, 1 when some failed (rerun to retry), 2 when
    the only failures are outputs that cannot be read as images (``unreadable`` lists them: a rerun cannot
    fix those), and the ``files`` of the bench folder, written by
    :func:`~editlens.runner.bench_results.write_bench_folder`: ``report=False`` leaves out the HTML); with
    ``estimate_only`` a :class:`~editlens.runner.bench_results.BenchEstimate` and nothing run; when a signal
    stops the editors, a :class:`~editlens.runner.bench_results.GenerationStopped`.

    ``shard`` (``"I/N"``): only the cases of that shard (:func:`shard_items`); ``OUT/shard.json``
    says which, and ``editlens runs merge`` joins the shards' folders and writes the table of all.
    ``where``: the editors on Ray workers (:func:`editlens.runner.edit.open_editor`'s keywords).
    """
    from editlens.bench.base import ANSWER_POLICIES, IMAGE_POLICIES

    if answers not in ANSWER_POLICIES:
        raise InputError(f"--answers must be one of {', '.join(ANSWER_POLICIES)}, got {answers!r}")
    if images not in IMAGE_POLICIES:
        raise InputError(f"--images must be one of {', '.join(IMAGE_POLICIES)}, got {images!r}")
    bench, items = read_benchmark(name, data, split=split, limit=limit)
    bench.answers, bench.release = answers, release
    bench.release_version()  # an unknown --release is refused before anything runs
    suite = bench.metrics = metric_suite(bench, metrics)  # the table shows the columns computed
    all_items = items
    items = shard_items(items, shard)
    if not items:
        raise InputError(f"--shard {shard}: none of the {len(all_items)} cases falls in this shard; use fewer shards")
    if (edits is None) == (not editors):
        raise InputError("give --edits DIR (outputs made already, DIR/<model>/...) or --editor SPEC (make them now)")
    prompts = None
    if not suite:
        from editlens.bench.prompts import load_prompts

        prompts = load_prompts(bench, prompts_from)
        if not prompts.from_clone:  # the release's parser reads the release's prompts' answers only
            bench.answers = "strict"
    editor_records: dict[str, Any] = {}
    if editors and estimate_only:  # nothing is generated for an estimate: every case counts
        located = Located([], {}, models=list(editors))
        located.samples = [EditSample(f"{e}/{it.id}", it.source, it.source, it.instruction) for e in editors
                           for it in items]
    elif editors:
        located, editor_records = generate(items, editors, Path(out), seed=seed, editor_options=editor_options,
                                           progress=progress, command=command, where=where)
        if located.stopped_by is not None:  # nothing is judged: a rerun makes the rest, then judges all
            return GenerationStopped(name, located.stopped_by, len(located.samples), editor_records)
    else:
        located = locate(bench, items, Path(edits), models_only)  # type: ignore[arg-type]
        if not estimate_only:
            located.notes += shape_notes(located)
    if estimate_only:
        return _estimate(name, bench, items, located, prompts, suite, max_new_tokens, probe, vlm)
    if not located.samples:
        raise InputError(f"{'--edits ' + str(edits) if edits else 'the editors'}: none of the {len(items)} cases has "
                         f"an output ({located.skipped[0]['reason'] if located.skipped else ''})")
    if suite:
        evaluators = _suite_metrics(suite, metric_models, device, dtype)
    else:
        if not vlm:
            raise InputError(f"{bench.spec.title} is judged by a vision-language model: pass --vlm DIR|URL")
        from editlens.bench.judge import BenchJudge

        assert prompts is not None  # judged benchmarks always have prompts (loaded above)
        evaluators = [BenchJudge(bench, prompts, located.items, answers=bench.answers, images=images,
                                 edited_files={s.id: s.edited for s in located.samples}, probe=probe,
                                 vlm=vlm, vlm_model=vlm_model,
                                 temperature=temperature, seed=seed, max_new_tokens=max_new_tokens,
                                 batch_size=batch_size, device=device, dtype=dtype, cache=cache,
                                 **({"http": http} if http is not None else {}))]
    from editlens.runner.run import run_evaluation

    root = Path(out)
    run_dir = root / "run"
    samples_manifest = write_samples_manifest(located.samples, run_dir)
    res = run_evaluation(located.samples, evaluators, run_dir, batch_size=batch_size, progress=progress,
                         command=command, device=device, dtype=dtype,
                         extra_manifest={"manifest": str(samples_manifest.resolve()),
                                         # the table's bootstrap: `runs leaderboard` of run/ uses the same
                                         "bootstrap": {"n": n_boot, "seed": seed},
                                         "benchmark": name, "data": str(Path(data).resolve()),
                                         "edits": str(Path(edits).resolve()) if edits else None,
                                         "editors": editor_records or None, "models": located.models,
                                         "skipped_outputs": len(located.skipped),
                                         **({"prompts": prompts.describe()} if prompts else {})})
    result = _table(bench, items, located, {ev.name for ev in evaluators}, run_dir, prompts=prompts, suite=suite,
                    answers=answers, images=images, editor_records=editor_records, n_boot=n_boot, seed=seed,
                    interrupted=res.interrupted, stopped_by=res.stopped_by)
    if shard is not None:  # what `runs merge` needs to put the shards' rows in one run's order
        result.table["shard"] = _write_shard(root, shard, all_items, located, benchmark=name, split=split, limit=limit,
                                             n_boot=n_boot, seed=seed)
    return write_bench_folder(result, root, report=report)


def _estimate(name: str, bench: Benchmark, items: Sequence[BenchItem], located: Located, prompts: Any,
              suite: dict[str, str], max_new_tokens: int, probe: bool, vlm: str | None) -> BenchEstimate:
    """``--estimate``: the judge calls of a judged benchmark, or the edits a metric suite would score."""
    if prompts is None:
        return BenchEstimate({"benchmark": name, "judge_calls": 0, "metrics": list(suite),
                              "edits_to_score": len(located.samples), "skipped": len(located.skipped)}, judged=False)
    from editlens.backends.engine import is_engine_url
    from editlens.bench.judge import estimate

    est = estimate(bench, items, prompts, len(located.models), max_new_tokens,
                   probe=bool(probe and is_engine_url(vlm)))
    n_found = len(located.samples)
    per_item = est["judge_calls"] / max(1, len(items) * max(1, len(located.models)))
    est.update({"edits_to_score": n_found, "skipped": len(located.skipped),
                "judge_calls_for_found_edits": round(per_item * n_found)})
    return BenchEstimate(est, judged=True)


def _suite_metrics(suite: dict[str, str], metric_models: dict[str, str] | None, device: str,
                   dtype: str) -> list[Any]:
    """The metrics of a metric-suite benchmark; a missing model names the part that needs none."""
    from editlens.errors import ModelUnavailableError
    from editlens.metrics.registry import get_spec
    from editlens.runner.selection import select_metrics

    try:
        return list[Any](select_metrics(list(suite), models=metric_models or {}, device=device, dtype=dtype).metrics)
    except ModelUnavailableError as exc:  # say how to score the part that needs no model
        free = [c for m, c in suite.items() if get_spec(m).model is None]
        if not free or len(free) == len(suite):
            raise
        raise ModelUnavailableError(f"{exc}\n  or score only the metrics that need no model: --metrics "
                                    f"{','.join(free)} (Python: metrics={free!r})") from None


def _table(bench: Benchmark, items: Sequence[BenchItem], located: Located, names: set[str], run_dir: Path, *,
           prompts: Any, suite: dict[str, str], answers: str, images: str, editor_records: dict[str, Any],
           n_boot: int, seed: int, interrupted: bool, stopped_by: int | None) -> BenchTable:
    """The paper's table from the run's stored rows, by the benchmark's protocol, and the exit status."""
    from editlens.runner.store import ResultsStore

    store = ResultsStore(run_dir)
    try:
        current = store.current_configs()
        stored = [r for r in store.rows({k: v for k, v in current.items() if k in names})]
        manifest = store.get_meta("manifest") or {}
    finally:
        store.close()
    rows = protocol_rows(bench, located, {it.id: it for it in items}, stored)
    table = bench.table(rows, n_boot=n_boot, seed=seed)
    table["comparison"] = comparison(table, bench.spec.table_layout.get("rank_by"), _lower_is_better(bench))
    judge = [e for e in manifest.get("evaluators", []) if e.get("name") in names]
    table.update({"judge": judge[0] if judge and prompts else None,
                  "prompts": prompts.describe() if prompts else None,
                  "metrics": dict(suite) or None,
                  "answers": answers_summary(bench, rows, answers) if prompts else None,
                  "images": ({"as": images, **(bench.spec.release_images.describe()
                                                if images == "release" and bench.spec.release_images else
                                                {"encoding": "png", "sizes": bench.spec.judge_image_sizes})}
                             if prompts else None),
                  "editors": editor_records or None,
                  "bootstrap": {"n": n_boot, "seed": seed, "level": 0.95},
                  "run_dir": str(run_dir), "interrupted": interrupted, "stopped_by": stopped_by,
                  "notes": located.notes or None})
    table.setdefault("release", bench.release_version())  # RISE names its own (commit and what it computes)
    # an output that cannot be decoded (corrupt, not an image, over the pixel limit) is not a lost request
    unreadable = sorted({r["sample_id"] for r in stored if r["status"] == "failed"
                         and (r.get("details") or {}).get("input_unreadable")})
    table["unreadable"] = unreadable or None
    failed = sum(1 for r in rows if r["status"] == "failed" and r["id"] not in set(unreadable))
    return BenchTable(table, rows, exit=1 if failed or interrupted else 2 if unreadable else 0)


def _write_shard(root: Path, shard: Any, all_items: Sequence[BenchItem], located: Located, **record: Any) -> str:
    """``OUT/shard.json``: which shard of which cases this folder holds, for ``runs merge``."""
    from editlens.core.io import write_json
    from editlens.runner.shards import ids_digest, parse_shard, shard_record

    part = parse_shard(str(shard))
    assert part is not None
    write_json(root / "shard.json", shard_record(
        part, [it.id for it in all_items], ids_digest([(it.id, it.source, it.instruction) for it in all_items]),
        "bench", **record, models=located.models, samples=[x.id for x in located.samples],
        skipped=[x["id"] for x in located.skipped]), default=str)
    return str(part)

def metric_suite(bench: Benchmark, metrics: Sequence[str] | None) -> dict[str, str]:
    """The part of ``bench``'s metric suite to compute (``--metrics a,b``: metric names or the paper's
    column names), as metric -> column; all of it when ``metrics`` is empty."""
    suite = dict(bench.spec.metrics)
    if not metrics:
        return suite
    if not suite:
        raise InputError(f"--metrics: {bench.spec.title} is judged by a vision-language model, not by a metric "
                         "suite (it has no metrics to choose)")
    by_column = {c.lower(): m for m, c in suite.items()}
    out: dict[str, str] = {}
    for name in metrics:
        m = name if name in suite else by_column.get(name.lower())
        if m is None:
            raise InputError(f"--metrics {name!r}: {bench.spec.title} computes "
                             + ", ".join(f"{m} ({c})" for m, c in suite.items()))
        out[m] = suite[m]
    return out


def answers_summary(bench: Benchmark, rows: Sequence[dict[str, Any]], requested: str) -> dict[str, Any]:
    """What the table says of how answers were read: the policy, whether it could apply (the
    release's parser reads the release's prompts only), and per model the items the two policies read
    differently and the answers the release would have made a value up for (left unscored)."""
    from editlens.bench.base import ANSWER_POLICIES

    policy, effective = requested, bench.answers
    per_model: dict[str, Any] = {}
    for r in rows:
        if "answers" not in r:
            continue
        m = per_model.setdefault(r["model"], {"read_differently": 0, "release_would_invent": 0, "items": []})
        if r.get("read_differently"):
            m["read_differently"] += 1
            m["items"].append(r["id"])
        m["release_would_invent"] += int(r["answers"].get("release", {}).get("invented", 0))
    for m in per_model.values():
        m["items"] = m["items"][:50]
    return {"policy": effective, "requested": policy, "policies": list(ANSWER_POLICIES),
            "what": dict(bench.spec.answer_policies) or None,
            "note": None if effective == policy else "the release's parser reads the release's prompts; with "
                    "editlens' own prompts (no --prompts-from) answers are read strictly",
            "read_differently": sum(m["read_differently"] for m in per_model.values()),
            "release_would_invent": sum(m["release_would_invent"] for m in per_model.values()),
            "per_model": per_model}


def write_samples_manifest(samples: Sequence[EditSample], run_dir: Path) -> Path:
    """``run/manifest.jsonl``: the edits the run judges, one row each (``id`` ``MODEL/CASE``, ``model``,
    ``source``, ``edited``, category, language and the case's text columns; paths relative to the file),
    so that ``run/`` is an ordinary run: ``report`` shows its images, ``arena`` and ``best-of-n`` read it."""
    from editlens.core.io import write_jsonl
    from editlens.runner.edit import portable_path

    run_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in samples:
        row: dict[str, Any] = {"id": s.id, "source": portable_path(s.source, run_dir),
                               "edited": portable_path(s.edited, run_dir), "instruction": s.instruction,
                               "model": s.model}
        if s.reference is not None:
            row["reference"] = portable_path(s.reference, run_dir)
        for key in ("source_caption", "target_caption"):
            if getattr(s, key) is not None:
                row[key] = getattr(s, key)
        row.update({k: v for k, v in s.metadata.items() if k not in row and isinstance(v, (str, int, float, bool))
                    and not (isinstance(v, str) and "#row=" in v)})
        rows.append(row)
    return write_jsonl(run_dir / "manifest.jsonl", rows, ensure_ascii=False, default=str)


def _lower_is_better(bench: Benchmark) -> list[str]:
    """The table columns of a metric suite whose metric is better lower (L1, L2, ...); judged
    dimensions are all better higher."""
    from editlens.metrics.registry import get_spec

    out = []
    for metric, column in bench.spec.metrics.items():
        try:
            if not get_spec(metric).higher_is_better:
                out.append(column)
        except KeyError:  # a metric a plugin registers elsewhere: no direction known, so no "best"
            continue
    return out
