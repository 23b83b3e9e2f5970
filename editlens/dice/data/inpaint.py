"""Inpainting backends for the stage-2 synthetic edits.

``opencv``: offline, classical (Telea) inpainting to erase an object; it
cannot draw a new object, so a substitution pastes another annotated object
instead (done by the dataset builder). ``diffusers:MODEL_DIR``: a diffusers
inpainting pipeline from a local directory (anything
``AutoPipelineForInpainting`` loads: Stable Diffusion inpainting, Kandinsky
2.2, ...), which both erases (prompted with "background", the object's name
as negative prompt) and substitutes (prompted with the target object). The
paper erased with LaMa and drew substitutions with Kandinsky 2.2 inpainting
(100 steps, guidance 4), whose settings are the defaults here.

Both backends change pixels only inside the object's mask grown by a few
pixels (``grow``): everything else stays pixel-identical, so the box of each
synthetic edit is known exactly.
"""

from __future__ import annotations

import inspect
import logging
import warnings
import zlib
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from editlens.errors import InputError, ModelUnavailableError

log = logging.getLogger(__name__)


class Inpainter(Protocol):
    name: str

    def remove(self, image: np.ndarray, mask: np.ndarray, label: str | None = None) -> np.ndarray:
        """``image`` with the masked object (named ``label`` when known) erased
        (filled with plausible background)."""

    def replace(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> np.ndarray | None:
        """``image`` with the masked region repainted as ``prompt``; ``None`` when the backend cannot draw."""


def _grow(mask: np.ndarray, px: int) -> np.ndarray:
    import cv2

    if px <= 0:
        return mask.astype(np.uint8)
    k = np.ones((2 * px + 1, 2 * px + 1), np.uint8)
    return cv2.dilate(mask.astype(np.uint8), k)


def _check_pair(image: np.ndarray, mask: np.ndarray) -> None:
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise InputError(f"inpainting needs an RGB uint8 image of shape (H, W, 3), got {image.dtype} {image.shape}")
    if mask.shape != image.shape[:2]:
        raise InputError(f"inpainting mask is {mask.shape[1]}x{mask.shape[0]} but the image is "
                         f"{image.shape[1]}x{image.shape[0]}")


class OpenCVInpainter:
    """Telea inpainting of the mask grown by a few pixels (object borders would
    otherwise survive as a ghost outline)."""

    name = "opencv"

    def __init__(self, radius: int = 7, grow: int = 3) -> None:
        self.radius, self.grow = radius, grow

    def remove(self, image: np.ndarray, mask: np.ndarray, label: str | None = None) -> np.ndarray:
        import cv2

        m = _grow(mask, self.grow) * 255
        bgr = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR)
        return cv2.cvtColor(cv2.inpaint(bgr, m, self.radius, cv2.INPAINT_TELEA), cv2.COLOR_BGR2RGB)

    def replace(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> np.ndarray | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "radius": self.radius, "grow": self.grow}


def feather_alpha(mask: np.ndarray, grow: int, feather: int) -> np.ndarray:
    """Blend weight of the inpainted pixels: 1 deep inside ``mask`` grown by
    ``grow`` px, falling to 0 over the last ``feather`` px before the grown
    border, and exactly 0 outside it (those pixels are never touched). With
    ``feather <= grow`` the object's own pixels all get weight 1.

    >>> m = np.zeros((1, 9), np.uint8); m[0, 4] = 1
    >>> feather_alpha(m, grow=2, feather=2).round(2).tolist()
    [[0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0]]
    """
    import cv2

    grown = _grow(mask, grow)
    if feather <= 0:
        return grown.astype(np.float32)
    # distance of each grown-mask pixel to the nearest pixel outside it (0 outside)
    padded = cv2.copyMakeBorder(grown, 1, 1, 1, 1, cv2.BORDER_CONSTANT, value=1)  # image edges are not borders
    dist = cv2.distanceTransform(padded, cv2.DIST_L2, cv2.DIST_MASK_PRECISE)[1:-1, 1:-1]
    return np.clip(dist / feather, 0.0, 1.0).astype(np.float32) * (grown > 0)


def context_window(box: tuple[int, int, int, int], shape: tuple[int, int], context: float,
                   min_side: int = 0) -> tuple[int, int, int, int]:
    """``(x0, y0, x1, y1)`` of the crop the model sees: the mask's box widened
    by ``context`` times its longer side on every side, at least ``min_side``
    px, made square where the image allows, shifted (not cut) to stay inside
    the image.

    >>> context_window((40, 40, 60, 50), (100, 200), 0.5)
    (30, 25, 70, 65)
    >>> context_window((0, 0, 10, 10), (100, 200), 0.5)
    (0, 0, 20, 20)
    >>> context_window((0, 0, 10, 10), (100, 200), 0.5, min_side=256)
    (0, 0, 200, 100)
    """
    x0, y0, x1, y1 = box
    h, w = shape
    side = max(round(max(x1 - x0, y1 - y0) * (1 + 2 * context)), min_side)

    def span(lo: int, hi: int, limit: int) -> tuple[int, int]:
        size = min(max(side, hi - lo), limit)
        start = min(max((lo + hi - size) // 2, 0), limit - size)
        return start, start + size

    (cx0, cx1), (cy0, cy1) = span(x0, x1, w), span(y0, y1, h)
    return cx0, cy0, cx1, cy1


def working_size(crop_w: int, crop_h: int, resolution: int) -> tuple[int, int]:
    """``(width, height)`` the pipeline runs at: the crop scaled so its longer
    side is ``resolution`` (the model's native size), both sides rounded to a
    multiple the pipeline accepts (64 for real models, 8 for tiny ones).

    >>> working_size(300, 200, 512), working_size(51, 37, 32)
    ((512, 320), (32, 24))
    """
    align = 64 if resolution >= 256 else 8
    scale = resolution / max(crop_w, crop_h)
    return (max(align, round(crop_w * scale / align) * align), max(align, round(crop_h * scale / align) * align))


def pick_inpaint_dtype(dtype: str, device: str) -> Any:
    """``auto``: bf16 on a CUDA GPU that has it, else fp16 on CUDA (the
    precision diffusion checkpoints are published in), fp32 on CPU and MPS
    (reduced precision there is slow or unsupported for these models).
    Explicit names (float32, float16, bfloat16 or fp32/fp16/bf16) are taken as given."""
    import torch

    if dtype != "auto":
        from editlens.models.precision import decide

        try:
            return decide(dtype, device).torch_dtype
        except ValueError as exc:
            raise InputError(str(exc)) from None
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def _weights_variant(root: Path) -> str | None:
    """``"fp16"`` when the pipeline's weights exist only as the half-precision
    variant (``*.fp16.safetensors``, as many hub repositories ship them)."""
    weights = [f.name for f in root.glob("*/*") if f.suffix in (".safetensors", ".bin")]
    halves = [n for n in weights if ".fp16." in n]
    return "fp16" if halves and len(halves) == len(weights) else None


class DiffusersInpainter:
    """A diffusers inpainting pipeline loaded from a local directory.

    Each call crops a window around the mask (``context`` times the object's
    size on each side), runs the pipeline on it at the model's native
    resolution (``resolution``, read from the model when ``None``), resizes
    the result back and blends it in with :func:`feather_alpha`: pixels
    outside the mask grown by ``grow`` px are returned unchanged, whatever
    the pipeline does to the rest of its canvas (VAE round trips alter every
    pixel slightly). Any image size works; the output has the input's size.

    Runs are reproducible: the noise of each call is seeded from ``seed``,
    the image, the mask and the prompt, so a resumed dataset build draws the
    same pixels as an uninterrupted one.
    """

    name = "diffusers"
    #: Prompt wordings, as templates (editlens/templates/NAME.txt, replaceable
    #: through $EDITLENS_TEMPLATE_DIR): erase, what erasing must not draw, draw $object.
    TEMPLATES = ("inpaint_remove", "inpaint_remove_negative", "inpaint_substitute")

    def __init__(self, model_dir: str, steps: int = 100, guidance: float = 4.0, device: str = "auto",
                 seed: int = 0, dtype: str = "auto", grow: int = 4, feather: int = 3, context: float = 0.5,
                 resolution: int | None = None) -> None:
        try:
            import diffusers
            from diffusers import AutoPipelineForInpainting
        except ImportError:
            raise ModelUnavailableError("--inpainter diffusers:... needs the diffusers package "
                                        "(pip install diffusers) and local inpainting weights") from None
        if steps < 1 or guidance < 0 or grow < 0 or feather < 0 or context < 0:
            raise InputError(f"inpainting settings out of range: steps={steps} (>= 1), guidance={guidance} (>= 0), "
                             f"grow={grow}, feather={feather}, context={context} (>= 0)")
        if resolution is not None and (resolution < 8 or resolution % 8):
            raise InputError(f"inpainting resolution must be a positive multiple of 8, got {resolution}")
        root = Path(model_dir)
        if not root.is_dir():
            raise InputError(f"inpainting model {model_dir}: directory not found")
        index = root / "model_index.json"
        if not index.is_file():
            raise ModelUnavailableError(f"inpainting model {model_dir}: no model_index.json, so not a saved diffusers "
                                        "pipeline (expected e.g. a Stable Diffusion inpainting or Kandinsky 2.2 "
                                        "inpainting directory written by save_pretrained)")
        from editlens.core.io import read_json

        doc = read_json(index, "the inpainting pipeline's index")
        saved_class = doc.get("_class_name", "?") if isinstance(doc, dict) else "?"
        from editlens.models.precision import resolve_device

        self.device = resolve_device(device)
        self.dtype = pick_inpaint_dtype(dtype, self.device)
        from transformers.utils import logging as hf_logging

        diffusers.utils.logging.disable_progress_bar()  # the dataset builder's bar is the one that matters
        hf_logging.disable_progress_bar()
        variant = _weights_variant(root)
        try:
            with warnings.catch_warnings():  # newer diffusers rename torch_dtype to dtype; older ones know only this
                warnings.simplefilter("ignore", FutureWarning)
                pipe = AutoPipelineForInpainting.from_pretrained(str(root), torch_dtype=self.dtype,
                                                                 local_files_only=True, variant=variant)
        except ValueError as exc:
            if "can't find a pipeline linked to" in str(exc):
                raise ModelUnavailableError(f"inpainting model {model_dir}: {saved_class} is not an inpainting "
                                            "pipeline and has no inpainting counterpart") from None
            raise ModelUnavailableError(f"inpainting model {model_dir}: cannot load ({exc})") from None
        except (OSError, TypeError, KeyError, AttributeError) as exc:
            raise ModelUnavailableError(f"inpainting model {model_dir}: cannot load "
                                        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
                                        ) from None
        self.params = set(inspect.signature(pipe.__call__).parameters)
        if "mask_image" not in self.params:
            raise ModelUnavailableError(f"inpainting model {model_dir}: {type(pipe).__name__} takes no mask_image; "
                                        "not an inpainting pipeline")
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(self.device)
        unet = getattr(pipe, "unet", None)
        self.unet_in_channels = getattr(getattr(unet, "config", None), "in_channels", None)
        if self.unet_in_channels == 4 and type(pipe).__name__.startswith("StableDiffusion"):
            # AutoPipeline turns a text-to-image SD model into an inpainter that only blends latents
            log.warning("%s: a text-to-image UNet (4 input channels) used for inpainting; erasures from a "
                        "dedicated inpainting model (9 channels) are far more convincing", model_dir)
        self.resolution = resolution or self._native_resolution()
        self.model_dir, self.steps, self.guidance, self.seed = model_dir, steps, guidance, seed
        self.variant = variant
        self.grow, self.feather, self.context = grow, feather, context
        from editlens.judges.templates import load_template

        self.templates = {n: load_template(n) for n in self.TEMPLATES}

    def _native_resolution(self) -> int:
        """The pipeline's default output side: UNet sample size times the VAE
        downscale for SD-style models, 512 when the model does not say."""
        unet, scale = getattr(self.pipe, "unet", None), getattr(self.pipe, "vae_scale_factor", None)
        size = getattr(getattr(unet, "config", None), "sample_size", None)
        if isinstance(size, (list, tuple)):
            size = max(size)
        return int(size * scale) if isinstance(size, int) and isinstance(scale, int) else 512

    def _seed_for(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> int:
        parts = [self.seed, zlib.crc32(np.ascontiguousarray(image).tobytes()),
                 zlib.crc32(np.ascontiguousarray(mask, dtype=bool).tobytes()), zlib.crc32(prompt.encode())]
        return int(np.random.SeedSequence(parts).generate_state(1)[0])

    def paint(self, image: np.ndarray, mask: np.ndarray, prompt: str, negative_prompt: str | None = None
              ) -> np.ndarray:
        """``image`` with the masked region repainted by the pipeline under ``prompt``."""
        import torch
        from PIL import Image

        _check_pair(image, mask)
        if not mask.any():
            return image.copy()
        h, w = image.shape[:2]
        alpha = feather_alpha(mask.astype(bool), self.grow, self.feather)
        ys, xs = np.nonzero(alpha)
        # a small object still gets half the model's canvas of surroundings (what to fill it with)
        x0, y0, x1, y1 = context_window((int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1),
                                        (h, w), self.context, min_side=self.resolution // 2)
        crop = np.ascontiguousarray(image[y0:y1, x0:x1])
        crop_mask = alpha[y0:y1, x0:x1] > 0
        ww, wh = working_size(x1 - x0, y1 - y0, self.resolution)
        model_image = Image.fromarray(crop).resize((ww, wh), Image.Resampling.BICUBIC)
        # box-filter then any-coverage: every pixel that must change stays inside the model's mask
        model_mask = Image.fromarray(crop_mask.astype(np.uint8) * 255).resize((ww, wh), Image.Resampling.BOX)
        model_mask = model_mask.point(lambda v: 255 if v > 0 else 0)
        kwargs: dict[str, Any] = {"prompt": prompt, "image": model_image, "mask_image": model_mask,
                                  "num_inference_steps": self.steps, "guidance_scale": self.guidance,
                                  "generator": torch.Generator(device="cpu").manual_seed(self._seed_for(image, mask,
                                                                                                        prompt)),
                                  "height": wh, "width": ww, "output_type": "np"}
        if negative_prompt:
            kwargs["negative_prompt"] = negative_prompt
        kwargs = {k: v for k, v in kwargs.items() if k in self.params}
        with torch.inference_mode():
            out = np.asarray(self.pipe(**kwargs).images[0], dtype=np.float32)
        if not np.isfinite(out).all():
            raise ModelUnavailableError(f"inpainting model {self.model_dir} produced NaN/inf pixels in "
                                        f"{str(self.dtype).replace('torch.', '')} on {self.device}; "
                                        "run it in float32 (--inpaint-dtype float32)")
        painted = Image.fromarray((np.clip(out, 0, 1) * 255).round().astype(np.uint8))
        painted_crop = np.asarray(painted.resize((x1 - x0, y1 - y0), Image.Resampling.BICUBIC), dtype=np.float32)
        a = alpha[y0:y1, x0:x1, None]
        blended = (a * painted_crop + (1 - a) * crop).round().astype(np.uint8)
        result = image.copy()
        # only pixels with weight > 0 are written: the rest is the input, bit for bit
        result[y0:y1, x0:x1] = np.where(a > 0, blended, crop)
        return result

    def _text(self, name: str, **values: str) -> str:
        import string

        t = self.templates[name]
        try:
            return string.Template(t.text).substitute(**values).strip()
        except (KeyError, ValueError) as exc:
            raise InputError(f"template {name} ({t.source}): {type(exc).__name__} {exc}") from None

    def remove(self, image: np.ndarray, mask: np.ndarray, label: str | None = None) -> np.ndarray:
        negative = self._text("inpaint_remove_negative")
        return self.paint(image, mask, self._text("inpaint_remove"), f"{label}, {negative}" if label else negative)

    def replace(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> np.ndarray | None:
        return self.paint(image, mask, self._text("inpaint_substitute", object=prompt))

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_dir, "pipeline": type(self.pipe).__name__,
                "unet_in_channels": self.unet_in_channels, "variant": self.variant, "steps": self.steps, "guidance": self.guidance,
                "seed": self.seed, "device": self.device, "dtype": str(self.dtype).replace("torch.", ""),
                "resolution": self.resolution, "grow": self.grow, "feather": self.feather, "context": self.context,
                "templates": {n: {"source": t.source, "sha256": t.sha256} for n, t in self.templates.items()}}


def make_inpainter(spec: str, steps: int | None = None, guidance: float | None = None, seed: int = 0,
                   device: str = "auto", dtype: str = "auto") -> Any:
    """``opencv`` or ``diffusers:MODEL_DIR``; ``steps``/``guidance`` (``None``:
    the paper's 100 and 4), ``seed``, ``device`` and ``dtype`` configure the
    diffusers backend only."""
    if spec == "opencv":
        if steps is not None or guidance is not None or dtype != "auto":
            raise InputError("--inpaint-steps/--inpaint-guidance/--inpaint-dtype apply to "
                             "--inpainter diffusers:MODEL_DIR only")
        return OpenCVInpainter()
    if spec.startswith("diffusers:") and spec[len("diffusers:"):]:
        return DiffusersInpainter(spec[len("diffusers:"):], steps=100 if steps is None else steps,
                                  guidance=4.0 if guidance is None else guidance, seed=seed, device=device,
                                  dtype=dtype)
    raise InputError(f"--inpainter must be opencv or diffusers:MODEL_DIR, got {spec!r}")
