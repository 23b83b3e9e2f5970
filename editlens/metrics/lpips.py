"""LPIPS (Zhang et al., 2018) with the official linear heads.

The heads ship in the ``lpips`` PyPI package (``lpips/weights/v0.1/*.pth``).
The backbones are torchvision's ImageNet AlexNet / VGG16; their layers are
rebuilt here with torchvision's parameter names so that torchvision's own
checkpoint files load unchanged. We do not import torchvision itself: its
PyPI builds are tied to exact torch builds and often fail to import beside
a different one, and LPIPS only needs the plain convolution stack.

Backbone weights are looked up in the torch hub cache
(``$TORCH_HOME/hub/checkpoints``, default ``~/.cache/torch/hub/checkpoints``)
under torchvision's file names, or taken from ``backbone_weights=PATH``.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from editlens.core.images import as_float_tensor_batch
from editlens.core.types import LoadedEdit, Score
from editlens.errors import ModelUnavailableError
from editlens.metrics.base import PairMetric

#: torchvision checkpoint file names and download URLs, per backbone.
BACKBONE_FILES = {
    "alex": ("alexnet-owt-7be5be79.pth", "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth"),
    "vgg": ("vgg16-397923af.pth", "https://download.pytorch.org/models/vgg16-397923af.pth"),
}

_ALEX = [("c", 3, 64, 11, 4, 2), ("r",), ("m",), ("c", 64, 192, 5, 1, 2), ("r",), ("m",),
         ("c", 192, 384, 3, 1, 1), ("r",), ("c", 384, 256, 3, 1, 1), ("r",), ("c", 256, 256, 3, 1, 1), ("r",)]
_ALEX_TAPS = (1, 4, 7, 9, 11)
_VGG_CFG: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]
_VGG_TAPS = (3, 8, 15, 22, 29)


def _alex_layers() -> list[nn.Module]:
    layers: list[nn.Module] = []
    for spec in _ALEX:
        if spec[0] == "c":
            cin, cout, k, s, p = (int(v) for v in spec[1:])
            layers.append(nn.Conv2d(cin, cout, k, stride=s, padding=p))
        elif spec[0] == "r":
            layers.append(nn.ReLU(inplace=False))
        else:
            layers.append(nn.MaxPool2d(kernel_size=3, stride=2))
    return layers


def _vgg_layers() -> list[nn.Module]:
    layers: list[nn.Module] = []
    cin = 3
    for v in _VGG_CFG:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU(inplace=False)]
            cin = int(v)
    return layers


class Backbone(nn.Module):
    """torchvision's ``features`` stack, returning the activations LPIPS taps."""

    def __init__(self, net: str) -> None:
        super().__init__()
        if net == "alex":
            self.features, self.taps = nn.Sequential(*_alex_layers()), _ALEX_TAPS
        elif net == "vgg":
            self.features, self.taps = nn.Sequential(*_vgg_layers()), _VGG_TAPS
        else:
            raise ValueError(f"LPIPS backbone must be 'alex' or 'vgg', got {net!r}")

    def channels(self) -> list[int]:
        out, last = [], 3
        for i, layer in enumerate(self.features):
            if isinstance(layer, nn.Conv2d):
                last = layer.out_channels
            if i in self.taps:
                out.append(last)
        return out

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = []
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in self.taps:
                feats.append(x)
            if i == self.taps[-1]:
                break
        return feats


class LPIPSNet(nn.Module):
    """LPIPS distance: scaled input -> backbone -> unit-normalised features ->
    squared differences -> learned 1x1 weights -> spatial mean -> sum."""

    shift: torch.Tensor
    scale: torch.Tensor

    def __init__(self, net: str = "alex") -> None:
        super().__init__()
        self.backbone = Backbone(net)
        self.lins = nn.ModuleList(nn.Conv2d(c, 1, 1, bias=False) for c in self.backbone.channels())
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1))
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1))

    @staticmethod
    def _unit(x: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
        return x / (torch.sqrt((x**2).sum(dim=1, keepdim=True)) + eps)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a``, ``b``: (N, 3, H, W) in [0, 1]. Returns (N,)."""
        fa = self.backbone(((a * 2 - 1) - self.shift) / self.scale)
        fb = self.backbone(((b * 2 - 1) - self.shift) / self.scale)
        total = torch.zeros(a.shape[0], dtype=a.dtype, device=a.device)
        for lin, x, y in zip(self.lins, fa, fb):
            total = total + lin((self._unit(x) - self._unit(y)) ** 2).mean(dim=(1, 2, 3))
        return total

    def load_heads(self, path: str | Path) -> None:
        state = torch.load(path, map_location="cpu", weights_only=True)
        for i, lin in enumerate(self.lins):
            assert isinstance(lin, nn.Conv2d)
            lin.weight.data.copy_(state[f"lin{i}.model.1.weight"])

    def load_backbone(self, path: str | Path) -> None:
        state = torch.load(path, map_location="cpu", weights_only=True)
        feats = {k[len("features."):]: v for k, v in state.items() if k.startswith("features.")}
        missing, _ = self.backbone.features.load_state_dict(feats, strict=False)
        if missing:
            raise ModelUnavailableError(f"{path}: not a torchvision checkpoint of this backbone (missing {missing[:3]})")


def heads_path(net: str, version: str = "0.1") -> Path | None:
    spec = importlib.util.find_spec("lpips")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "weights" / f"v{version}" / f"{net}.pth"
    return path if path.is_file() else None


def backbone_path(net: str) -> Path:
    return Path(torch.hub.get_dir()) / "checkpoints" / BACKBONE_FILES[net][0]


def lpips_problem(net: str, heads: str | None = None, backbone_weights: str | None = None) -> str | None:
    """Why LPIPS with backbone ``net`` cannot load here (``None`` when it can), with the fix."""
    hp = Path(heads) if heads else heads_path(net)  # heads_path: the lpips package's file, or None
    if hp is None or (heads and not hp.is_file()):
        return (f"LPIPS heads file weights/v0.1/{net}.pth not found: it ships with the lpips package "
                "(pip install --no-deps lpips==0.1.4), or pass --option lpips.heads=FILE")
    bp = Path(backbone_weights) if backbone_weights else backbone_path(net)
    if not bp.is_file():
        return (f"torchvision {net} backbone weights not found at {bp}: download {BACKBONE_FILES[net][1]} to that "
                "path, or pass --option lpips.backbone_weights=FILE")
    return None


def check_available(options: dict, models: dict) -> tuple[bool, str | None]:
    """The LPIPS metrics' availability hook (``MetricSpec.availability``)."""
    problem = lpips_problem(str(options.get("net", "alex")), options.get("heads"), options.get("backbone_weights"))
    return problem is None, problem


def preset_available(preset: object, models: dict) -> tuple[bool, str | None]:
    """An ``lpips`` preset's availability (:mod:`editlens.models.registry`)."""
    problem = lpips_problem(str(getattr(preset, "ref", "alex")))
    return problem is None, problem


def load_lpips(ref: Any, precision: Any, quantization: str, models: dict, heads: str | None = None,
               backbone_weights: str | None = None) -> LPIPSNet:
    """The ``lpips`` kind's loader (:func:`editlens.models.loader.load_model`); ``ref``: the backbone (alex, vgg)."""
    if quantization == "nf4":
        raise ModelUnavailableError("LPIPS loads unquantised")
    return build_lpips(ref.ref, heads, backbone_weights).to(precision.device, precision.torch_dtype)


def build_lpips(net: str = "alex", heads: str | None = None, backbone_weights: str | None = None) -> LPIPSNet:
    """An LPIPS network with real weights, or a clear error saying which file is missing."""
    if net not in BACKBONE_FILES:
        raise ValueError(f"LPIPS backbone must be one of {sorted(BACKBONE_FILES)}, got {net!r}")
    hp = Path(heads) if heads else heads_path(net)
    if hp is None or not hp.is_file():
        raise ModelUnavailableError(
            f"LPIPS linear heads for '{net}' not found"
            + (f" at {hp}" if hp else "")
            + ". They ship with the lpips package: `pip install --no-deps lpips==0.1.4` "
            "(--no-deps: editlens does not need its torchvision), or pass heads=PATH."
        )
    bp = Path(backbone_weights) if backbone_weights else backbone_path(net)
    if not bp.is_file():
        name, url = BACKBONE_FILES[net]
        raise ModelUnavailableError(
            f"LPIPS needs torchvision's ImageNet {net} weights, file {name}, not found at {bp}. "
            f"Download {url} (on a machine with internet) and put it at {bp} "
            f"(the torch hub cache; set TORCH_HOME to move it), or pass backbone_weights=PATH "
            f"(CLI: --option lpips.backbone_weights=PATH)."
        )
    model = LPIPSNet(net)
    model.load_heads(hp)
    model.load_backbone(bp)
    return model.eval()


class LPIPS(PairMetric):
    """LPIPS distance (lower is more similar). ``region`` zero-weights nothing:
    excluded pixels are filled with mid-grey in both images, as for CLIP."""

    def __init__(self, net: str = "alex", compare: str = "source", region: str = "all",
                 heads: str | None = None, backbone_weights: str | None = None, device: str = "auto",
                 dtype: str = "auto") -> None:
        super().__init__(compare, region)
        from editlens.models.precision import decide

        self.net, self.heads, self.backbone_weights = net, heads, backbone_weights
        self.precision = decide(dtype, device)
        self.device = self.precision.device
        self._model: LPIPSNet | None = None

    @property
    def model(self) -> LPIPSNet:
        if self._model is None:
            from editlens.models.loader import load_model

            self._model = load_model(self.net, kind="lpips", device=self.device, dtype=self.precision.dtype,
                                     heads=self.heads, backbone_weights=self.backbone_weights)
        return self._model

    def compute(self, batch: Sequence[LoadedEdit]) -> list[float | Score]:
        from editlens.metrics.embedding import patch

        out: list[float | Score] = [0.0] * len(batch)
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, s in enumerate(batch):
            groups[s.source.shape].append(i)
        for idx in groups.values():
            pairs = []
            for i in idx:
                a, b = self.pair(batch[i])
                keep = self.region_mask(batch[i])
                if keep is not None:
                    a, b = patch(a, keep), patch(b, keep)
                pairs.append((a, b))
            dt = self.precision.torch_dtype
            ta = as_float_tensor_batch([p[0] for p in pairs]).to(self.device, dt)
            tb = as_float_tensor_batch([p[1] for p in pairs]).to(self.device, dt)
            with torch.inference_mode():
                values = self.model(ta, tb).float()
            for i, v in zip(idx, values.tolist()):
                out[i] = v
        return out

    def describe(self) -> dict[str, Any]:
        from editlens.models.fingerprint import cached_sha256

        files = {"heads": Path(self.heads) if self.heads else heads_path(self.net),
                 "backbone": Path(self.backbone_weights) if self.backbone_weights else backbone_path(self.net)}
        model: dict[str, Any] = {"net": self.net, "device": self.device, "dtype": self.precision.dtype}
        for role, path in files.items():
            model[role] = str(path) if path else None
            model[f"{role}_sha256"] = cached_sha256(path) if path and path.is_file() else None
        return {**super().describe(), "model": model}
