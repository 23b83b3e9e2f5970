"""Fine-tuning an InstructPix2Pix-style editor with a reward (ADIEE §3.4).

Two recipes, alone or together, on the one training loop
(:mod:`editlens.training`):

* **reward-conditioned fine-tuning** (as the ADIEE release does it): per
  (source, instruction) a target is drawn among scored candidates (several
  editors' outputs, and the source itself scored 0) with weights by quality
  level (:mod:`editlens.adiee.tune_data`); the instruction gets the target's
  quality suffix (:mod:`editlens.adiee.editor_prompt`); the UNet (whole, or
  LoRA adapters) learns the InstructPix2Pix denoising MSE on the target's
  noisy latents concatenated with the source's latents (the VAE and the text
  encoder stay frozen). Validation edits held-out sources prompted with the
  top quality and scores them with any evaluator.
* **ReFL** (reward feedback learning, ImageReward's recipe as the ADIEE paper
  uses it): from pure noise, denoise without gradients down to a random late
  step of a ``refl_steps``-step DDIM schedule, take one step with gradients,
  predict the clean latents, decode them and score them with a
  *differentiable* reward; ``refl_weight * (best - reward)`` is added to the
  MSE (``best``: the reward's maximum when bounded, else 0).

The export is a diffusers folder (``StableDiffusionInstructPix2PixPipeline``
loads it; LoRA adapters are merged into the UNet) with
``editlens_editor.json`` saying how to prompt it (``prompt_suffix``) and what
it was trained from.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from editlens.adiee.editor_prompt import QualityPrompt, load_quality_prompt
from editlens.adiee.train import _flip_rot, sample_order
from editlens.adiee.tune_data import (
    Group,
    TargetWeighting,
    check_table_choice,
    draw_target,
    read_tuning_data,
    target_weighting,
)
from editlens.core.embedded import parse_ref
from editlens.core.images import load_image, resize_to
from editlens.core.io import read_json
from editlens.errors import InputError
from editlens.training.loop import TrainingTask

EDITOR_FILE = "editlens_editor.json"
FAMILY = "instruct-pix2pix"
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


#: ``--val-protocol``: how validation edits are made. ``editlens`` (default): held-out sources at
#: ``--resolution``, the base's scheduler, ``--val-steps``, ``--guidance``/``--image-guidance``, seed ``seed + i``
#: per source, the top-quality prompt of the run's suffix. ``release``: as ADIEE's editor validation where the
#: data allows (held-out sources of the run's data, not ImagenHub): inputs at 512 px, EulerAncestral, 100 steps,
#: guidance 7.5 / image guidance 1.5, every edit from the same generator seeded 42, the prompt the instruction +
#: ``". The image quality is five out of five."`` with ``".."`` made ``"."``.
VAL_PROTOCOLS = ("editlens", "release")
RELEASE_VALIDATION = {"resolution": 512, "scheduler": "EulerAncestralDiscreteScheduler", "steps": 100,
                      "guidance": 7.5, "image_guidance": 1.5, "seed": 42,
                      "prompt": "{instruction}. The image quality is five out of five. ('..' -> '.')"}


def release_validation_prompt(instruction: str) -> str:
    """The release's validation prompt: the instruction, then ``". The image quality is five out of five."``,
    then every ``..`` made ``.``.

    >>> release_validation_prompt("Make it red."), release_validation_prompt("Make it red")
    ('Make it red. The image quality is five out of five.', 'Make it red. The image quality is five out of five.')
    """
    return (instruction + ". The image quality is five out of five.").replace("..", ".")


@dataclass
class TuneConfig:
    base: str  # an InstructPix2Pix / MagicBrush diffusers folder or hub id
    data: str  # relabel output (.jsonl) or a scored run directory
    out: str
    score_metric: str | None = None  # the run's evaluator whose scores pick targets
    source_as_candidate: bool = True
    target_weights: str = "balanced"  # balanced | uniform (by quality level) | table (by rounded score)
    target_weight_table: str | None = None  # JSON {score: weight} or a clone of the release (its WEIGHT_DICT)
    reward_prompt: bool = True  # append the quality suffix (off: plain instructions, e.g. ReFL alone)
    #: the candidate id naming each source's ground-truth edit (e.g. ``target``); with ``reward_prompt`` off the
    #: MSE target is that edit only, as the release's RL data mode (``None``: a weighted draw among candidates)
    ground_truth: str | None = None
    suffix_template: str | None = None
    suffix_from_clone: str | None = None
    binning: str = "release"
    levels: str = "words"
    lora_rank: int = 0  # 0: the whole UNet trains (as released)
    lora_alpha: int | None = None  # default: the rank
    lr: float = 5e-5
    batch_size: int = 4
    grad_accum: int = 1
    steps: int = 1000
    warmup_steps: int = 0
    lr_decay: str = "constant"
    clip: float = 1.0
    resolution: int = 256
    augment: bool = True
    conditioning_dropout: float = 0.0
    val_every: int = 0  # 0: only at the end
    val_count: int = 4  # held-out (source, instruction) groups
    val_at_start: bool = True
    val_metric: str | None = None
    val_steps: int = 20
    guidance: float = 7.5
    image_guidance: float = 1.5
    val_protocol: str = "editlens"  # see VAL_PROTOCOLS
    refl_weight: float = 0.0  # 0: no ReFL
    refl_metric: str | None = None
    refl_steps: int = 40
    refl_min_step: int = 30  # the gradient step is drawn from [refl_min_step, refl_steps)
    save_every: int = 0
    keep_checkpoints: int = 2
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    metric_options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        for name in ("batch_size", "grad_accum", "steps", "val_steps", "refl_steps"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.lora_rank < 0:
            raise InputError(f"lora_rank must be 0 (whole UNet) or more, got {self.lora_rank}")
        if self.resolution % 8:
            raise InputError(f"resolution must be a multiple of 8, got {self.resolution}")
        if self.val_protocol not in VAL_PROTOCOLS:
            raise InputError(f"val_protocol must be one of {', '.join(VAL_PROTOCOLS)}, got {self.val_protocol!r}")
        if not 0 <= self.conditioning_dropout < 1:
            raise InputError(f"conditioning_dropout must be in [0, 1), got {self.conditioning_dropout}")
        check_table_choice(self.target_weights, self.target_weight_table, "--target-weights")
        if self.refl_weight < 0:
            raise InputError(f"refl_weight must be 0 or more, got {self.refl_weight}")
        if self.ground_truth is not None and self.reward_prompt:
            raise InputError("--ground-truth sets the MSE target of ReFL-only tuning (the release's RL mode): give "
                             "it with --no-reward-prompt (reward-conditioned tuning draws among all candidates)")
        if self.refl_weight > 0 and not 0 <= self.refl_min_step < self.refl_steps:
            raise InputError(f"refl_min_step must be in [0, refl_steps={self.refl_steps}), got {self.refl_min_step}")

    def validation_settings(self) -> dict[str, Any]:
        """How validation edits are made under ``val_protocol`` (recorded in the summary and the editor card)."""
        if self.val_protocol == "release":
            return {"protocol": "release", **RELEASE_VALIDATION,
                    **({} if self.reward_prompt else {"prompt": "{instruction} (no reward prompt)"})}
        return {"protocol": "editlens", "resolution": self.resolution, "scheduler": "the base's", "steps": self.val_steps,
                "guidance": self.guidance, "image_guidance": self.image_guidance, "seed": f"{self.seed} + i",
                "prompt": "the run's top-quality prompt" if self.reward_prompt else "{instruction}"}

    def identity(self) -> dict[str, Any]:
        """What a resumed run must share: the model it builds and what it sees at each step."""
        d = asdict(self)
        keys = ("base", "score_metric", "source_as_candidate", "target_weights", "target_weight_table", "reward_prompt",
                "ground_truth", "suffix_template",
                "suffix_from_clone", "binning", "levels", "lora_rank", "lora_alpha", "batch_size", "grad_accum",
                "resolution", "augment", "conditioning_dropout", "val_count", "refl_weight", "refl_metric",
                "refl_steps", "refl_min_step", "seed")
        return {**{k: d[k] for k in keys}, "data": str(Path(self.data).resolve())}


def ground_truth_targets(groups: list[Any], name: str) -> dict[str, Any]:
    """Each group's ground-truth candidate: the one whose id is ``name`` or ends in ``/name``, ``:name``,
    ``_name`` or ``-name``; a group with none or several is refused, naming it."""
    out: dict[str, Any] = {}
    none: list[str] = []
    several: list[str] = []
    for g in groups:
        hits = [c for c in g.candidates if c.id == name or c.id.endswith((f"/{name}", f":{name}", f"_{name}",
                                                                            f"-{name}"))]
        if len(hits) == 1:
            out[g.key] = hits[0]
        else:
            (none if not hits else several).append(f"{g.source} ({g.instruction[:40]!r})")
    if none or several:
        raise InputError(f"--ground-truth {name!r}: {len(none)} source(s) without a candidate of that id"
                         + (f" (e.g. {none[0]})" if none else "") + f", {len(several)} with several"
                         + (f" (e.g. {several[0]})" if several else "") + "; every source needs exactly one")
    return out


def to_tensor(img: np.ndarray) -> torch.Tensor:
    """HWC uint8 -> CHW float in [-1, 1]."""
    return torch.from_numpy(np.array(img, dtype=np.float32)).permute(2, 0, 1).div(127.5).sub(1.0)


def base_editor_settings(base: str) -> dict[str, Any]:
    """The generation ``settings`` of the base editor's ``editlens_editor.json`` (a local folder, or a hub
    snapshot already in the cache), so that the tuned editor generates as its base did; ``{}`` when none."""
    path: Any = Path(base).expanduser() / EDITOR_FILE
    if not path.is_file():
        try:
            from huggingface_hub import try_to_load_from_cache

            path = try_to_load_from_cache(base, EDITOR_FILE)
        except Exception:  # noqa: BLE001 - not a hub id either: no settings to keep
            return {}
        if not isinstance(path, str):
            return {}
    doc = read_json(path, f"the settings of --base {base}")
    found = (doc.get("settings") if isinstance(doc, dict) else None) or {}
    return dict(found) if isinstance(found, dict) else {}


class Editor:
    """The base pipeline's parts: frozen VAE and text encoder, the UNet that learns."""

    def __init__(self, base: str, precision: Any, lora_rank: int, lora_alpha: int | None, seed: int,
                 gradient_checkpointing: bool) -> None:
        from diffusers import StableDiffusionInstructPix2PixPipeline

        from editlens.models.precision import torch_dtype

        frozen = torch_dtype(precision.weights_dtype)
        try:
            pipe = StableDiffusionInstructPix2PixPipeline.from_pretrained(base, dtype=frozen,
                                                                          safety_checker=None)
        except (OSError, ValueError) as exc:
            raise InputError(f"--base {base}: cannot load an InstructPix2Pix pipeline there ({exc})") from None
        if pipe.unet.config.in_channels != 8:
            raise InputError(f"--base {base}: its UNet takes {pipe.unet.config.in_channels} input channels, an "
                             "InstructPix2Pix UNet takes 8 (noisy latents + source latents)")
        self.device = torch.device(precision.device)
        self.vae, self.text_encoder, self.tokenizer = pipe.vae, pipe.text_encoder, pipe.tokenizer
        self.scheduler_config = dict(pipe.scheduler.config)
        self.scheduler_class = type(pipe.scheduler)
        for m in (self.vae, self.text_encoder):
            m.requires_grad_(False).eval().to(self.device)
        unet = pipe.unet.to(self.device)
        if lora_rank:
            from peft import LoraConfig

            unet.requires_grad_(False)
            torch.manual_seed(seed)  # the adapters' initial values
            unet.add_adapter(LoraConfig(r=lora_rank, lora_alpha=lora_alpha or lora_rank, init_lora_weights="gaussian",
                                        target_modules=LORA_TARGETS))
        else:
            unet.requires_grad_(True)
        if gradient_checkpointing:
            unet.enable_gradient_checkpointing()
        self.unet = unet
        from diffusers import DDPMScheduler

        self.noise_scheduler = DDPMScheduler.from_config(self.scheduler_config)
        self.scaling = float(self.vae.config.scaling_factor)

    def encode_text(self, prompts: list[str]) -> torch.Tensor:
        ids = self.tokenizer(prompts, padding="max_length", max_length=self.tokenizer.model_max_length,
                             truncation=True, return_tensors="pt").input_ids.to(self.device)
        return self.text_encoder(ids)[0]

    def pipeline(self, unet: Any = None) -> Any:
        from diffusers import StableDiffusionInstructPix2PixPipeline

        return StableDiffusionInstructPix2PixPipeline(
            vae=self.vae, text_encoder=self.text_encoder, tokenizer=self.tokenizer, unet=unet or self.unet,
            scheduler=self.scheduler_class.from_config(self.scheduler_config), safety_checker=None,
            feature_extractor=None, requires_safety_checker=False)


class TuneEditorTask(TrainingTask):
    """Reward-conditioned fine-tuning (and ReFL) of an InstructPix2Pix UNet for :func:`editlens.training.run`."""

    def __init__(self, cfg: TuneConfig, editor: Editor, groups: list[Group], val_groups: list[Group],
                 prompt: QualityPrompt, weights: TargetWeighting, val_reward: Any, refl_reward: Any,
                 data_desc: dict[str, Any], precision: Any, log: Callable[[str], None]) -> None:
        self.cfg, self.editor, self.groups, self.val_groups = cfg, editor, groups, val_groups
        self.prompt, self.weights, self.val_reward, self.refl_reward = prompt, weights, val_reward, refl_reward
        self.data_desc, self.precision, self.log = data_desc, precision, log
        self.model, self.lr = editor.unet, cfg.lr
        self.per_step = cfg.batch_size * cfg.grad_accum
        self.order = sample_order(len(groups), cfg.steps * self.per_step, cfg.seed)
        self.step_now = 0
        self.share = "micro-batches"  # how several processes share a step (distributed.choose_share)
        #: group key -> its ground-truth candidate (``--ground-truth``: the only MSE target)
        self.ground_truth: dict[str, Any] = {}
        self.best = self._reward_best(refl_reward)

    @staticmethod
    def _reward_best(reward: Any) -> float:
        if reward is None:
            return 0.0
        high = reward.value_range[1] if reward.higher_is_better else -reward.value_range[0]
        return float(high) if math.isfinite(high) else 0.0

    # -- data -----------------------------------------------------------------------------------
    def image(self, path: str) -> np.ndarray:
        arr, _ = load_image(parse_ref(path) or path)  # a file, or a table cell (a benchmark's parquet row)
        r = self.cfg.resolution
        return arr if arr.shape[:2] == (r, r) else resize_to(arr, (r, r))

    def instruction_for(self, instruction: str, score10: float | None) -> str:
        if not self.cfg.reward_prompt:
            return instruction
        return self.prompt.prompt(instruction, score10) if score10 is not None else self.prompt.top_prompt(instruction)

    def batch(self, step: int, micro: int) -> dict[str, Any]:
        from editlens.training.distributed import current

        start = step * self.per_step + micro * self.cfg.batch_size
        if start + self.cfg.batch_size > len(self.order):  # a run extended beyond its first --steps
            self.order = sample_order(len(self.groups), start + self.cfg.batch_size, self.cfg.seed)
        src, tgt, prompts, plain, levels = [], [], [], [], []
        # several processes: whole micro-batches each, or each its share of every micro-batch's positions
        mine = range(start, start + self.cfg.batch_size)
        positions = list(mine[current().share(self.cfg.batch_size)] if self.share == "examples" else mine)
        for pos in positions:
            g = self.groups[self.order[pos]]
            rng = np.random.default_rng([self.cfg.seed, pos])
            c = self.ground_truth[g.key] if self.ground_truth else draw_target(g, self.weights, rng)
            a, b = self.image(g.source), self.image(c.edited)
            if self.cfg.augment:
                a, b = _flip_rot(a, b, rng)
            src.append(to_tensor(a))
            tgt.append(to_tensor(b))
            prompts.append(self.instruction_for(g.instruction, c.score10))
            plain.append(g.instruction)
            levels.append(self.prompt.level(c.score10))
        dev = self.editor.device
        return {"source": torch.stack(src).to(dev), "target": torch.stack(tgt).to(dev), "prompts": prompts,
                "instructions": plain, "levels": levels, "positions": positions}

    def generators(self, positions: list[int]) -> list[torch.Generator]:
        """One generator per sample, seeded by (seed, sample position): a sample's noise, timestep and
        dropout draws are the same whichever process computes it, and in whichever micro-batch share."""
        return [torch.Generator().manual_seed(int(np.random.default_rng([self.cfg.seed, pos, 3]).integers(2**62)))
                for pos in positions]

    # -- losses ---------------------------------------------------------------------------------
    def loss(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        import torch.nn.functional as F

        ed, unet = self.editor, self.editor.unet
        gens = self.generators(batch["positions"])
        vdtype = next(ed.vae.parameters()).dtype
        with torch.no_grad():
            posterior = ed.vae.encode(batch["target"].to(vdtype)).latent_dist
            latents = (posterior.mean + posterior.std * _randn(posterior.mean, gens)) * ed.scaling
            source_latents = ed.vae.encode(batch["source"].to(vdtype)).latent_dist.mode()
            text = ed.encode_text(batch["prompts"])
        b = latents.shape[0]
        if self.cfg.conditioning_dropout > 0:  # InstructPix2Pix's classifier-free guidance training
            p = self.cfg.conditioning_dropout
            u = torch.cat([torch.rand(1, generator=g) for g in gens]).to(latents.device)
            with torch.no_grad():
                empty = ed.encode_text([""]).expand_as(text)
            text = torch.where((u < 2 * p).view(b, 1, 1), empty, text)
            keep_image = ~((u >= p) & (u < 3 * p))
            source_latents = source_latents * keep_image.view(b, 1, 1, 1).to(source_latents.dtype)
        noise = _randn(latents, gens)
        sched = ed.noise_scheduler
        t = torch.cat([torch.randint(0, sched.config.num_train_timesteps, (1,), generator=g) for g in gens])
        t = t.to(latents.device).long()
        noisy = sched.add_noise(latents, noise, t)
        if sched.config.prediction_type == "v_prediction":
            target = sched.get_velocity(latents, noise, t)
        else:
            target = noise
        pred = unet(torch.cat([noisy, source_latents], dim=1), t, text).sample
        mse = F.mse_loss(pred.float(), target.float())
        figures = {"mse": float(mse.detach()), "mean_level": float(np.mean(batch["levels"]))}
        if self.cfg.refl_weight <= 0:
            return mse, figures
        reward = self.refl(batch, source_latents.detach(), gens)
        scored = torch.isfinite(reward.detach())  # an unscored edit (e.g. no [SCORE] emitted) adds nothing
        if not bool(scored.any()):
            figures.update({"refl_scored": 0.0})
            return mse, figures
        r = reward[scored]
        refl = (self.best - r).mean() if self.refl_reward.higher_is_better else (r - self.best).mean()
        figures.update({"refl_reward": float(r.detach().float().mean()), "refl_loss": float(refl.detach()),
                        "refl_scored": float(scored.float().mean())})
        return mse + self.cfg.refl_weight * refl, figures

    def refl(self, batch: dict[str, Any], source_latents: torch.Tensor,
             gens: list[torch.Generator] | None = None) -> torch.Tensor:
        """The reward of the clean image predicted at a random late step (gradients through that step only).
        The step is one per micro-batch (torch's RNG, seeded alike in every process), the starting noise
        one per sample (``gens``)."""
        from diffusers import DDIMScheduler

        ed, cfg = self.editor, self.cfg
        sched = DDIMScheduler.from_config(ed.scheduler_config)
        sched.set_timesteps(cfg.refl_steps, device=ed.device)
        last = int(torch.randint(cfg.refl_min_step, cfg.refl_steps, (1,)).item())
        with torch.no_grad():  # the top-quality prompt: the reward should go up where the editor is asked for it
            text = ed.encode_text([self.instruction_for(i, None) for i in batch["instructions"]])
        start = _randn(source_latents, gens) if gens is not None else torch.randn_like(source_latents)
        latents = start * sched.init_noise_sigma
        with torch.no_grad():
            for t in sched.timesteps[:last]:
                eps = ed.unet(torch.cat([latents, source_latents], dim=1), t, text).sample
                latents = sched.step(eps, t, latents).prev_sample
        t = sched.timesteps[last]
        eps = ed.unet(torch.cat([latents, source_latents], dim=1), t, text).sample.float()
        a = sched.alphas_cumprod.to(ed.device)[t].float()
        clean = (latents.float() - (1 - a).sqrt() * eps) / a.sqrt()
        vdtype = next(ed.vae.parameters()).dtype
        images = ed.vae.decode((clean / ed.scaling).to(vdtype)).sample.float().clamp(-1, 1)
        return self.refl_reward(images, instructions=batch["instructions"], sources=batch["source"].float(),
                                value_range=(-1, 1))

    # -- validation -----------------------------------------------------------------------------
    @property
    def has_validation(self) -> bool:
        return bool(self.val_groups) and self.val_reward is not None

    def step_info(self, step: int) -> dict[str, Any]:
        self.step_now = step + 1  # the step whose end a following validation sees
        return {}

    def validate(self) -> dict[str, Any]:
        """Edit the held-out sources with the top-quality prompt; score the edits."""
        from PIL import Image

        from editlens.core.io import atomic_write

        cfg = self.cfg
        release = cfg.val_protocol == "release"
        pipe = self.editor.pipeline()
        if release:  # the release validates with EulerAncestral on the base's scheduler configuration
            from diffusers import EulerAncestralDiscreteScheduler

            pipe.scheduler = EulerAncestralDiscreteScheduler.from_config(self.editor.scheduler_config)
        pipe.set_progress_bar_config(disable=True)
        folder = Path(cfg.out) / "validation" / f"step-{self.step_now:07d}"
        folder.mkdir(parents=True, exist_ok=True)
        edited, sources, instructions = [], [], []
        v = cfg.validation_settings()
        for i, g in enumerate(self.val_groups):
            if release:  # 512 px inputs; every edit from a copy of one generator seeded 42
                arr, _ = load_image(parse_ref(g.source) or g.source)
                side = int(v["resolution"])
                src = arr if arr.shape[:2] == (side, side) else resize_to(arr, (side, side))
                gen = torch.Generator(device="cpu").manual_seed(int(v["seed"]))
                prompt = release_validation_prompt(g.instruction) if cfg.reward_prompt else g.instruction
            else:
                src = self.image(g.source)
                gen = torch.Generator(device="cpu").manual_seed(cfg.seed + i)
                prompt = self.instruction_for(g.instruction, None)
            out = pipe(prompt, image=Image.fromarray(src), num_inference_steps=int(v["steps"]),
                       guidance_scale=float(v["guidance"]), image_guidance_scale=float(v["image_guidance"]),
                       generator=gen, output_type="np").images[0]
            img = (np.clip(out, 0, 1) * 255).round().astype(np.uint8)
            png = Image.fromarray(img)
            atomic_write(folder / f"{i:03d}.png", lambda fh, im=png: im.save(fh, format="PNG"), mode="wb")  # type: ignore[misc]
            edited.append(img)
            sources.append(src)
            instructions.append(g.instruction)  # scored on the instruction alone, as released
        values = self.val_reward(np.stack(edited), instructions=instructions, sources=np.stack(sources)).float()
        ok = values[torch.isfinite(values)]
        return {"reward": float(ok.mean()) if len(ok) else None, "n": int(len(ok)),
                "unscored": int(len(values) - len(ok)), "images": str(folder)}

    def describe_validation(self, val: dict[str, Any]) -> str:
        r = "-" if val.get("reward") is None else f"{val['reward']:.4f}"
        return f"mean reward {r} over {val['n']} held-out edits" + (f" ({val['unscored']} unscored)"
                                                                    if val.get("unscored") else "")

    # -- export ---------------------------------------------------------------------------------
    def precision_record(self) -> dict[str, Any]:
        return {"frozen_weights": self.precision.weights_dtype,
                "trained": f"LoRA r{self.cfg.lora_rank}" if self.cfg.lora_rank else "whole UNet"}

    def editor_card(self, steps_done: int) -> dict[str, Any]:
        cfg = self.cfg
        base_settings = base_editor_settings(cfg.base)
        return {
            "family": FAMILY,
            # the base's generation settings (e.g. a 64-px editor's resolution) go on with the tuned editor
            **({"settings": base_settings} if base_settings else {}),
            "prompt_suffix": self.prompt.editor_suffix if cfg.reward_prompt else "",
            "source": {"base": cfg.base, "base_settings": base_settings or None, "data": self.data_desc,
                       "trained_steps": steps_done,
                       "trained": "lora-merged" if cfg.lora_rank else "unet",
                       "lora_rank": cfg.lora_rank or None, "recipe": self.recipe()},
            "quality_prompt": self.prompt.describe() if cfg.reward_prompt else None,
            "defaults": {"num_inference_steps": cfg.val_steps, "guidance_scale": cfg.guidance,
                         "image_guidance_scale": cfg.image_guidance, "resolution": cfg.resolution},
            "precision": {**self.precision.to_dict(), **self.precision_record()},
        }

    def recipe(self) -> dict[str, Any]:
        cfg = self.cfg
        r: dict[str, Any] = {"reward_conditioned": cfg.reward_prompt, "target_weights": cfg.target_weights,
                             "target_weighting": self.weights.describe(),
                             "source_as_candidate": cfg.source_as_candidate, "lr": cfg.lr,
                             "batch_size": cfg.batch_size, "grad_accum": cfg.grad_accum,
                             "conditioning_dropout": cfg.conditioning_dropout, "augment": cfg.augment,
                             "mse_target": (f"each source's ground truth ({cfg.ground_truth!r}) only" if cfg.ground_truth
                                            else "a weighted draw among each source's candidates")}
        if cfg.refl_weight > 0:
            r["refl"] = {"weight": cfg.refl_weight, "steps": cfg.refl_steps, "min_step": cfg.refl_min_step,
                         "reward": self.refl_reward.describe()}
        if self.val_reward is not None:
            r["validation_reward"] = self.val_reward.describe()
            r["validation"] = cfg.validation_settings()
        return r

    def summary_extra(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"validation": self.cfg.validation_settings()} if self.has_validation else {}

    def export(self, result: Any) -> dict[str, Any]:
        from editlens.core.io import atomic_directory, write_json
        from editlens.models.describe import write_description

        target = Path(self.cfg.out) / "editor"
        unet = copy.deepcopy(self.editor.unet).float()
        if self.cfg.lora_rank:
            unet.fuse_lora()  # merged into the weights: the folder loads as a plain pipeline
            unet.unload_lora()
        unet.requires_grad_(False)
        with atomic_directory(target) as tmp:
            pipe = self.editor.pipeline(unet)
            pipe.save_pretrained(tmp)
            write_json(Path(tmp) / EDITOR_FILE, self.editor_card(result.steps_done), default=str)
            write_description(tmp, "editor", "editlens.editors.diffusers_editor:DiffusersEditor",
                              pipeline=type(pipe).__name__)
        return {"editor": str(target)}


def _randn(like: torch.Tensor, gens: list[torch.Generator]) -> torch.Tensor:
    """Standard normal noise shaped like ``like``, row i drawn from ``gens[i]`` (on the CPU, in float32,
    then moved: the same numbers on every device)."""
    rows = [torch.randn((1, *like.shape[1:]), generator=g) for g in gens]
    return torch.cat(rows).to(like.device, like.dtype)


def split_groups(groups: list[Group], val_count: int, seed: int) -> tuple[list[Group], list[Group]]:
    """Hold out ``val_count`` groups (a seeded choice) for validation."""
    if val_count <= 0:
        return groups, []
    if val_count >= len(groups):
        raise InputError(f"--val-count {val_count} leaves no training data ({len(groups)} sources in all)")
    held = set(np.random.default_rng([seed, 7]).permutation(len(groups))[:val_count].tolist())
    return [g for i, g in enumerate(groups) if i not in held], [g for i, g in enumerate(groups) if i in held]


def tune_editor(cfg: TuneConfig, val_reward: Any = None, refl_reward: Any = None,
                echo: Callable[[str], None] = print, progress: bool = True, restart: bool = False,
                log_to: str | None = None, sharding: str | None = None) -> dict[str, Any]:
    """Train (or resume) and export the editor; returns the summary (``exit_code`` 130/143 when interrupted).

    ``val_reward`` / ``refl_reward``: :class:`editlens.runner.reward.RewardFunction` objects (or
    anything with the same call, ``value_range``, ``higher_is_better`` and ``describe``); the ReFL
    one must be differentiable.
    """
    from editlens.training.fsdp import refuse_fsdp

    # validation and the export copy the UNet, which FSDP's sharded modules do not allow
    refuse_fsdp(sharding, "adiee tune-editor", "its validation edits and its export copy the UNet, which sharded "
                "modules do not allow")
    from editlens.models.precision import decide
    from editlens.training import LoopSettings, PlotSpec, prepare_run_dir, run
    from editlens.training.distributed import choose_share, local_device, main_only, start

    cfg.validate()
    if cfg.refl_weight > 0:
        if refl_reward is None:
            raise InputError("ReFL (--refl-weight > 0) needs a reward evaluator (--refl-metric)")
        if not getattr(refl_reward, "differentiable", False):
            raise InputError(f"ReFL needs a differentiable reward; {refl_reward.describe().get('name')} has no "
                             "differentiable path (it scores decoded images only)")
    precision = decide(cfg.dtype, local_device(cfg.device), "training")
    procs = start(precision.device)  # several processes under accelerate launch / torchrun
    echo = main_only(echo, procs)
    share = choose_share(cfg.batch_size, cfg.grad_accum, procs)
    # the prompt, the data and the target weights are checked before the run folder is written
    prompt = load_quality_prompt(cfg.suffix_template, cfg.suffix_from_clone, cfg.binning, cfg.levels)
    groups, desc = read_tuning_data(cfg.data, cfg.score_metric, cfg.source_as_candidate,
                                    several=cfg.ground_truth is None)
    truth = ground_truth_targets(groups, cfg.ground_truth) if cfg.ground_truth else {}
    train_groups, val_groups = split_groups(groups, cfg.val_count, cfg.seed)
    weights = target_weighting(train_groups, prompt.level, cfg.target_weights, cfg.target_weight_table)
    prepare_run_dir(cfg.out, cfg.identity(), asdict(cfg), restart=restart)
    torch.manual_seed(cfg.seed)
    editor = Editor(cfg.base, precision, cfg.lora_rank, cfg.lora_alpha, cfg.seed, cfg.gradient_checkpointing)
    task = TuneEditorTask(cfg, editor, train_groups, val_groups, prompt, weights, val_reward, refl_reward, desc,
                          precision, echo)
    task.share = share
    task.ground_truth = truth
    if truth:
        echo(f"MSE target: each source's ground truth ({cfg.ground_truth!r}) only, plain instructions (the "
             "release's RL data mode)")
    n = sum(p.numel() for p in editor.unet.parameters() if p.requires_grad)
    echo(f"tuning {cfg.base} on {precision.device} (computing in {precision.dtype}: {precision.reason}); "
         f"{len(train_groups)} train / {len(val_groups)} validation sources, {desc['candidates']} candidates; "
         f"{n:,} trainable UNet parameters ({'LoRA r%d' % cfg.lora_rank if cfg.lora_rank else 'whole UNet'})")
    if cfg.reward_prompt:
        echo(f"reward prompt ({prompt.origin}, {prompt.binning} bins): e.g. '...{prompt.top_suffix}'; "
             f"{weights.summary()}")
    series = ("loss", "mse", "refl_loss") if cfg.refl_weight > 0 else ("loss",)
    res = run(task, LoopSettings(
        out=cfg.out, steps=cfg.steps, precision=precision, identity=cfg.identity(), config=asdict(cfg), seed=cfg.seed,
        grad_accum=cfg.grad_accum, warmup_steps=cfg.warmup_steps, decay=cfg.lr_decay, max_grad_norm=cfg.clip,
        save_every=cfg.save_every, keep=cfg.keep_checkpoints, eval_every=cfg.val_every,
        eval_at_start=cfg.val_at_start, progress=progress, share=share, desc="tune-editor", log=echo, log_to=log_to,
        sharding=sharding,
        plot=PlotSpec(title="editor fine-tuning", ylabel="training loss", series=series, val_metric="reward",
                      val_label="validation reward", logy=cfg.refl_weight == 0)))
    return {**res.summary, "exit_code": res.exit_code}
