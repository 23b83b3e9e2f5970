"""Frame preprocessing for the two-frame video model.

ViFi-CLIP's video pipeline differs from CLIP's image processor in two ways
that change the numbers a checkpoint sees: the short side is resized to 256
and the centre 224 x 224 crop is kept (the crop is 7/8 of the short side), and
pixels are normalised with the *ImageNet* mean/std on the 0-255 scale, not
CLIP's. Both are configurable so a plain CLIP checkpoint can be fed its own
statistics (``preset="clip"``).

The work is split in two so each unique image is decoded, resized and
cropped once (:meth:`FramePreprocess.crop`, uint8, cheap to keep) and
normalised in a batch on the model's device (:meth:`FramePreprocess.normalise`).

>>> p = FramePreprocess()
>>> p.resize, p.crop_size, p.mean
(256, 224, (123.675, 116.28, 103.53))
>>> import numpy as np
>>> p.crop(np.zeros((300, 400, 3), np.uint8)).shape
(224, 224, 3)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from PIL import Image

from editlens.errors import InputError

#: ImageNet statistics on the 0-255 scale (what ViFi-CLIP's video pipeline uses).
IMAGENET_MEAN_255 = (123.675, 116.28, 103.53)
IMAGENET_STD_255 = (58.395, 57.12, 57.375)
#: CLIP's own statistics, converted to the 0-255 scale.
CLIP_MEAN_255 = tuple(round(v * 255, 6) for v in (0.48145466, 0.4578275, 0.40821073))
CLIP_STD_255 = tuple(round(v * 255, 6) for v in (0.26862954, 0.26130258, 0.27577711))
#: ViFi-CLIP keeps the centre 224 of a 256 short side.
RESIZE_RATIO = 256 / 224

_INTERP = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
#: resizers by name: Pillow's (antialiased when shrinking) and OpenCV's bilinear without antialiasing, which
#: ViFi-CLIP's test pipeline uses (mmcv.imresize, 'bilinear' = cv2.INTER_LINEAR)
INTERPOLATIONS = ("bilinear", "bicubic", "bilinear-cv2")
PRESETS = {"vifi": (IMAGENET_MEAN_255, IMAGENET_STD_255), "clip": (CLIP_MEAN_255, CLIP_STD_255)}


@dataclass(frozen=True)
class FramePreprocess:
    """Short-side resize, centre crop, per-channel normalisation (0-255 scale).

    Attributes:
        resize: target length of the short side before cropping.
        crop_size: side of the square centre crop (the model's input size).
        mean, std: per-channel statistics on the 0-255 scale.
        interpolation: ``"bilinear-cv2"`` (OpenCV, no antialiasing: ViFi-CLIP's
            release), ``"bilinear"`` or ``"bicubic"`` (Pillow, antialiased).
    """

    resize: int = 256
    crop_size: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN_255
    std: tuple[float, float, float] = IMAGENET_STD_255
    interpolation: str = "bilinear-cv2"

    def __post_init__(self) -> None:
        if self.crop_size < 1 or self.resize < self.crop_size:
            raise ValueError(f"need resize >= crop_size >= 1, got resize={self.resize}, crop_size={self.crop_size}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError("mean and std need 3 values each, std > 0")

    @classmethod
    def for_size(cls, crop_size: int, preset: str = "vifi", **overrides: Any) -> "FramePreprocess":
        """A recipe for a model's input size. ``"vifi"``: short side 8/7 of the
        crop (224 -> 256), OpenCV bilinear without antialiasing, ImageNet
        statistics, as ViFi-CLIP's test pipeline. ``"clip"``: CLIP's own
        processor (short side = crop, bicubic, CLIP statistics).

        >>> FramePreprocess.for_size(32).resize, FramePreprocess.for_size(224, "clip").resize
        (37, 224)
        """
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
        mean, std = PRESETS[preset]
        resize = int(round(crop_size * RESIZE_RATIO)) if preset == "vifi" else crop_size
        base: dict[str, Any] = dict(resize=resize, crop_size=crop_size, mean=mean, std=std,
                    interpolation="bilinear-cv2" if preset == "vifi" else "bicubic")
        base.update({k: v for k, v in overrides.items() if v is not None})
        fields: dict[str, Any] = {k: tuple(v) if k in ("mean", "std") else v for k, v in base.items()}
        return cls(**fields)

    def crop(self, image: np.ndarray) -> np.ndarray:
        """Resize the short side to :attr:`resize` (aspect kept) and cut the
        centre :attr:`crop_size` square; RGB uint8 in, RGB uint8 out."""
        if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            got = getattr(image, "shape", type(image).__name__)
            raise InputError(f"a frame must be an RGB uint8 array of shape (H, W, 3), got {got}")
        h, w = image.shape[:2]
        scale = self.resize / min(h, w)
        nh, nw = max(self.resize, int(h * scale + 0.5)), max(self.resize, int(w * scale + 0.5))
        if (nh, nw) != (h, w):
            if self.interpolation == "bilinear-cv2":
                import cv2

                image = cv2.resize(np.ascontiguousarray(image), (nw, nh), interpolation=cv2.INTER_LINEAR)
            else:
                image = np.asarray(Image.fromarray(image).resize((nw, nh), _INTERP[self.interpolation]))
        top, left = (nh - self.crop_size) // 2, (nw - self.crop_size) // 2
        return np.array(image[top : top + self.crop_size, left : left + self.crop_size], copy=True)  # writable, owned

    def normalise(self, crops: Any) -> Any:
        """``(N, H, W, 3)`` uint8 tensor -> ``(N, 3, H, W)`` float32, normalised."""
        import torch

        x = crops.permute(0, 3, 1, 2).float()
        mean = torch.tensor(self.mean, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std

    def __call__(self, images: Sequence[np.ndarray]) -> Any:
        """Crop and normalise a list of frames into one ``(N, 3, S, S)`` tensor."""
        import torch

        return self.normalise(torch.from_numpy(np.stack([self.crop(a) for a in images])))

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FramePreprocess":
        fields: dict[str, Any] = {k: tuple(v) if k in ("mean", "std") else v for k, v in data.items()}
        return cls(**fields)
