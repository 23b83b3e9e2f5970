"""Inpainting backends for the stage-2 synthetic edits.

``opencv``: offline, classical (Telea) inpainting to erase an object; it
cannot draw a new object, so a substitution pastes another annotated object
instead (done by the dataset builder). ``diffusers:MODEL_DIR``: a diffusers
inpainting pipeline (the paper used Kandinsky 2.2, 100 steps, guidance 4),
which both erases ("background") and substitutes (prompted with the target
object); it needs the ``diffusers`` package and local weights.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from editlens.errors import InputError, ModelUnavailableError


class Inpainter(Protocol):
    name: str

    def remove(self, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """``image`` with the masked object erased (filled with plausible background)."""

    def replace(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> np.ndarray | None:
        """``image`` with the masked region repainted as ``prompt``; ``None`` when the backend cannot draw."""


def _grow(mask: np.ndarray, px: int) -> np.ndarray:
    import cv2

    if px <= 0:
        return mask.astype(np.uint8)
    k = np.ones((2 * px + 1, 2 * px + 1), np.uint8)
    return cv2.dilate(mask.astype(np.uint8), k)


class OpenCVInpainter:
    """Telea inpainting of the mask grown by a few pixels (object borders would
    otherwise survive as a ghost outline)."""

    name = "opencv"

    def __init__(self, radius: int = 7, grow: int = 3) -> None:
        self.radius, self.grow = radius, grow

    def remove(self, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        import cv2

        m = _grow(mask, self.grow) * 255
        bgr = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2BGR)
        return cv2.cvtColor(cv2.inpaint(bgr, m, self.radius, cv2.INPAINT_TELEA), cv2.COLOR_BGR2RGB)

    def replace(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> np.ndarray | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "radius": self.radius, "grow": self.grow}


class DiffusersInpainter:
    """A diffusers inpainting pipeline loaded from a local directory."""

    name = "diffusers"

    def __init__(self, model_dir: str, steps: int = 100, guidance: float = 4.0, device: str = "auto",
                 seed: int = 0) -> None:
        try:
            from diffusers import AutoPipelineForInpainting
        except ImportError:
            raise ModelUnavailableError("--inpainter diffusers:... needs the diffusers package "
                                        "(pip install diffusers) and local inpainting weights") from None
        from editlens.models.resolve import pick_device

        self.device = pick_device(device)
        try:
            self.pipe = AutoPipelineForInpainting.from_pretrained(model_dir, local_files_only=True).to(self.device)
        except (OSError, ValueError) as exc:
            raise ModelUnavailableError(f"inpainting model {model_dir!r}: cannot load ({exc})") from None
        self.model_dir, self.steps, self.guidance, self.seed = model_dir, steps, guidance, seed

    def _paint(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> np.ndarray:
        import torch
        from PIL import Image

        h, w = image.shape[:2]
        gen = torch.Generator(device="cpu").manual_seed(self.seed)
        out = self.pipe(prompt=prompt, image=Image.fromarray(image), mask_image=Image.fromarray(_grow(mask, 3) * 255),
                        num_inference_steps=self.steps, guidance_scale=self.guidance, generator=gen).images[0]
        painted = np.asarray(out.convert("RGB").resize((w, h)))
        keep = _grow(mask, 3).astype(bool)[..., None]
        return np.where(keep, painted, image)  # outside the mask the image stays untouched

    def remove(self, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return self._paint(image, mask, "background, empty scene")

    def replace(self, image: np.ndarray, mask: np.ndarray, prompt: str) -> np.ndarray | None:
        return self._paint(image, mask, f"a photo of a {prompt}")

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_dir, "steps": self.steps, "guidance": self.guidance}


def make_inpainter(spec: str) -> Any:
    """``opencv`` or ``diffusers:MODEL_DIR``."""
    if spec == "opencv":
        return OpenCVInpainter()
    if spec.startswith("diffusers:") and spec[len("diffusers:"):]:
        return DiffusersInpainter(spec[len("diffusers:"):])
    raise InputError(f"--inpainter must be opencv or diffusers:MODEL_DIR, got {spec!r}")
