"""DICE training commands: build the two training datasets and fine-tune
the detector or the coherence estimator with LoRA.

``editlens dice`` already names the one-edit command, so the issue's
``dice make-pairs`` / ``dice make-edits`` / ``dice train`` are
``dice-make-pairs`` / ``dice-make-edits`` / ``dice-train`` here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from editlens.cli.common import emit_json, guarded


def register(app: typer.Typer) -> None:
    app.command("dice-train")(train_cmd)
    app.command("dice-make-pairs")(make_pairs_cmd)
    app.command("dice-make-edits")(make_edits_cmd)
    app.command("dice-merge")(merge_cmd)


@guarded
def merge_cmd(
    base: str = typer.Option(..., "--base", help="Base VLM (directory or hub id)."),
    adapter: str = typer.Option(..., "--adapter", help="LoRA adapter folder (e.g. runs/s1/adapter)."),
    out: Path = typer.Option(..., "--out", help="Folder for the merged model."),
    device: str = typer.Option("cpu", "--device"),
) -> None:
    """Merge a LoRA adapter into its base (the released detector's stage-1 model is such a merge)."""
    from editlens.dice.training import merge_adapter

    typer.echo(f"merged model -> {merge_adapter(base, adapter, out, device)}")


@guarded
def train_cmd(
    stage: str = typer.Option(..., "--stage", help="detect or coherence."),
    data: Path = typer.Option(..., "--data", help="Training JSONL (or a dataset folder from dice-make-pairs/-edits)."),
    base: str = typer.Option(..., "--base", help="Base VLM: local directory or hub id (e.g. an Idefics3)."),
    out: Path = typer.Option(..., "--out", help="Run directory (rerun the same command to resume)."),
    eval_data: Optional[Path] = typer.Option(None, "--eval-data", help="Held-out JSONL: AP (detect) or accuracy (coherence)."),
    init_adapter: Optional[str] = typer.Option(None, "--init-adapter", help="Start from this LoRA adapter (e.g. stage 1's)."),
    steps: int = typer.Option(1000, "--steps", min=1),
    lr: float = typer.Option(1e-4, "--lr", help="Paper: 1e-4 detector, 1e-5 coherence."),
    batch_size: int = typer.Option(1, "--batch-size", min=1, help="Examples per optimizer step (paper: 8 detector, 1 coherence)."),
    rank: int = typer.Option(64, "--rank"),
    alpha: int = typer.Option(16, "--alpha"),
    dropout: float = typer.Option(0.1, "--dropout"),
    eval_every: int = typer.Option(0, "--eval-every", help="Evaluate every N steps (0: at the end)."),
    save_every: int = typer.Option(100, "--save-every", min=1),
    eval_max_new_tokens: int = typer.Option(256, "--eval-max-new-tokens", min=1),
    max_eval: int = typer.Option(100, "--max-eval", min=1),
    repetition_penalty: Optional[float] = typer.Option(None, "--repetition-penalty", help="Decoding for evaluation and the written preset (default: 1.5 detect, as released; 1.0 coherence)."),
    seed: int = typer.Option(0, "--seed"),
    device: str = typer.Option("auto", "--device"),
    quantization: str = typer.Option("auto", "--quantization", help="auto (QLoRA: 4-bit NF4 base + paged AdamW 8-bit where CUDA+bitsandbytes), nf4 (force QLoRA, CPU too; needs bitsandbytes) or none."),
    longest_edge: Optional[int] = typer.Option(None, "--longest-edge", help="Processor resize (paper: 1456)."),
    prompts: Optional[Path] = typer.Option(None, "--dice-prompts", help="Official prompts from a local DICE clone."),
    drawing: str = typer.Option("released", "--drawing", help="Coherence box convention: released or paper."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Fine-tune a DICE detector (--stage detect) or coherence estimator (--stage coherence) with LoRA."""
    from editlens.dice.training import TrainConfig, train

    from editlens.models.quant import normalise_choice

    quantization = normalise_choice(quantization, "--quantization")
    cfg = TrainConfig(stage=stage, data=str(data.resolve()), out=str(out), base=base,
                      eval_data=str(eval_data.resolve()) if eval_data else None, init_adapter=init_adapter,
                      steps=steps, lr=lr, batch_size=batch_size, rank=rank, alpha=alpha, dropout=dropout,
                      eval_every=eval_every, save_every=save_every, eval_max_new_tokens=eval_max_new_tokens,
                      max_eval=max_eval, repetition_penalty=repetition_penalty, seed=seed, device=device, quantization=quantization,
                      longest_edge=longest_edge, prompts=str(prompts) if prompts else None, drawing=drawing)
    res = train(cfg, progress=progress, log=lambda m: typer.echo(m, err=True))
    doc = {"out": str(res.out), "steps_done": res.steps_done, "resumed_from": res.resumed_from,
           "first_loss": res.first_loss, "last_loss": res.last_loss, "evals": res.evals,
           "adapter": str(res.adapter) if res.adapter else None, "preset": str(res.preset) if res.preset else None,
           "interrupted": res.interrupted, "notes": res.notes}
    if json_out:
        emit_json(doc)
    else:
        f = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        typer.echo(f"steps {res.resumed_from} -> {res.steps_done}; loss {f(res.first_loss)} -> {f(res.last_loss)}")
        for e in res.evals:
            typer.echo("eval " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in e.items()))
        for n in res.notes:
            typer.echo(f"note: {n}")
        if res.preset:
            typer.echo(f"adapter {res.adapter}\nrun it: editlens dice --dice-preset {res.preset} --source S "
                       f"--edited E --instruction I")
    if res.interrupted:
        typer.echo("interrupted: checkpoint saved; rerun the same command to continue.", err=True)
        raise typer.Exit(130)


@guarded
def make_pairs_cmd(
    annotations: Path = typer.Option(..., "--annotations", help="COCO/LVIS-format instances JSON."),
    images: Path = typer.Option(..., "--images", help="Folder of the images the annotations name."),
    out: Path = typer.Option(..., "--out", help="Dataset folder (rerun to resume)."),
    embedder: str = typer.Option("dino", "--embedder", help="DINOv2 model: role, hub id or local directory."),
    min_similarity: float = typer.Option(0.6, "--min-similarity", help="DINOv2 cosine threshold (paper: 0.6)."),
    neighbours: int = typer.Option(5, "--neighbours", min=1, help="Nearest neighbours searched per image."),
    max_class_diff: int = typer.Option(15, "--max-class-diff", help="Keep pairs differing by fewer classes."),
    match_iou: float = typer.Option(0.5, "--match-iou", help="IoU for a same-class object across the pair to be EDIT."),
    min_box: int = typer.Option(16, "--min-box", help="Drop boxes with a side under this many pixels."),
    verify_with: Optional[str] = typer.Option(None, "--verify-with", help="OWLv2 model to verify ADD/REMOVE labels."),
    max_pairs: Optional[int] = typer.Option(None, "--max-pairs"),
    device: str = typer.Option("auto", "--device"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Stage-1 data: pairs of similar real images, labelled ADD/REMOVE/EDIT from their annotations."""
    from editlens.dice.data.pairs import PairConfig, make_pairs

    stats = make_pairs(PairConfig(str(annotations), str(images), str(out), embedder=embedder,
                                  min_similarity=min_similarity, neighbours=neighbours, max_class_diff=max_class_diff,
                                  match_iou=match_iou, min_box=min_box, verify_with=verify_with,
                                  max_pairs=max_pairs, device=device), progress=progress)
    emit_json(stats)


@guarded
def make_edits_cmd(
    annotations: Path = typer.Option(..., "--annotations", help="COCO/LVIS-format instances JSON with masks."),
    images: Path = typer.Option(..., "--images", help="Folder of the images the annotations name."),
    out: Path = typer.Option(..., "--out", help="Dataset folder (rerun to resume)."),
    inpainter: str = typer.Option("opencv", "--inpainter", help="opencv (offline) or diffusers:MODEL_DIR (a local "
                                  "inpainting pipeline, e.g. SD or Kandinsky 2.2 inpainting)."),
    inpaint_steps: Optional[int] = typer.Option(None, "--inpaint-steps", min=1,
                                                help="Diffusion steps of a diffusers inpainter (paper: 100)."),
    inpaint_guidance: Optional[float] = typer.Option(None, "--inpaint-guidance", min=0.0,
                                                     help="Guidance scale of a diffusers inpainter (paper: 4)."),
    inpaint_dtype: str = typer.Option("auto", "--inpaint-dtype", help="auto (bf16/fp16 on CUDA, fp32 on CPU), "
                                      "float32, float16 or bfloat16."),
    device: str = typer.Option("auto", "--device", help="Device of a diffusers inpainter."),
    max_objects: int = typer.Option(4, "--max-objects", help="Objects edited per image (paper: 4)."),
    min_area: float = typer.Option(0.03, "--min-area", help="Smallest mask, fraction of the image (paper: 3%)."),
    max_overlap: float = typer.Option(0.05, "--max-overlap", help="Largest overlap between chosen masks (paper: 5%)."),
    unchanged: float = typer.Option(0.15, "--unchanged", help="Fraction of images kept as unchanged pairs."),
    jpeg_min: int = typer.Option(15, "--jpeg-min"),
    jpeg_max: int = typer.Option(50, "--jpeg-max"),
    coherence: bool = typer.Option(True, "--coherence/--no-coherence", help="Also write templated coherence records."),
    max_images: Optional[int] = typer.Option(None, "--max-images"),
    seed: int = typer.Option(0, "--seed"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Stage-2 data: synthetic ADD/REMOVE/EDIT edits of annotated objects by inpainting, JPEG-compressed."""
    from editlens.dice.data.edits import EditConfig, make_edits

    stats = make_edits(EditConfig(str(annotations), str(images), str(out), inpainter=inpainter,
                                  max_objects=max_objects, min_area=min_area, max_overlap=max_overlap,
                                  unchanged=unchanged, jpeg_range=(jpeg_min, jpeg_max), coherence=coherence,
                                  max_images=max_images, seed=seed, inpaint_steps=inpaint_steps,
                                  inpaint_guidance=inpaint_guidance, device=device, inpaint_dtype=inpaint_dtype),
                       progress=progress)
    emit_json(stats)
