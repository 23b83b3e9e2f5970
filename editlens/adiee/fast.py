"""The fast feature scorer (``adiee_fast``): a small MLP on frozen CLIP and
DINOv2 embeddings, trained on the same ADIEE data in minutes on a CPU.

Features of (source s, edited e, instruction t), all embeddings L2-normalised:
``[clip(e) - clip(s), clip(t), (clip(e) - clip(s)) * clip(t), dino(e) - dino(s),
cos(clip s, clip e), cos(dino s, dino e), cos(clip e, t) - cos(clip s, t)]``.
The head predicts 0-10 (sigmoid x 10), trained with L1 like the VLM scorer's
regression head. Embeddings come from the shared cached encoders, so every
image and instruction is encoded once.

A saved scorer is a directory: ``config.json`` (``model_type: adiee_fast``,
feature sizes, the encoders it was trained with and their weight hashes)
and ``head.safetensors``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from editlens.core.io import atomic_write, read_json
from editlens.errors import InputError, ModelUnavailableError


def features(cs: torch.Tensor, ce: torch.Tensor, ct: torch.Tensor, ds: torch.Tensor, de: torch.Tensor) -> torch.Tensor:
    """The feature vector (see the module docstring) for a batch.

    >>> e = torch.eye(4)
    >>> features(e[:1], e[1:2], e[2:3], e[:1], e[:1]).shape
    torch.Size([1, 19])
    """
    n = lambda x: nn.functional.normalize(x.float(), dim=-1)  # noqa: E731
    cs, ce, ct, ds, de = n(cs), n(ce), n(ct), n(ds), n(de)
    dc = ce - cs
    cos = lambda a, b: (a * b).sum(-1, keepdim=True)  # noqa: E731
    return torch.cat([dc, ct, dc * ct, de - ds, cos(cs, ce), cos(ds, de), cos(ce, ct) - cos(cs, ct)], -1)


class FastHead(nn.Sequential):
    def __init__(self, dim: int, hidden: int = 64) -> None:
        super().__init__(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 1))

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self(x)[..., 0]) * 10.0


class FastScorer:
    def __init__(self, head: FastHead, clip: Any, dino: Any, config: dict[str, Any]) -> None:
        self.head, self.clip, self.dino, self.config = head.eval(), clip, dino, config

    def encoder_refs(self) -> dict[str, Any]:
        return {"clip": self.clip.describe(), "dino": self.dino.describe()}

    @torch.no_grad()
    def embed(self, sources: Sequence[np.ndarray], edited: Sequence[np.ndarray], instructions: Sequence[str],
              src_hashes: Sequence[str] | None = None, edt_hashes: Sequence[str] | None = None) -> torch.Tensor:
        cs = self.clip.encode_images(list(sources), src_hashes)
        ce = self.clip.encode_images(list(edited), edt_hashes)
        ct = self.clip.encode_texts(list(instructions))
        ds = self.dino.encode_images(list(sources), src_hashes)
        de = self.dino.encode_images(list(edited), edt_hashes)
        return features(cs, ce, ct, ds, de)

    @torch.no_grad()
    def score(self, sources: Sequence[np.ndarray], edited: Sequence[np.ndarray], instructions: Sequence[str],
              src_hashes: Sequence[str] | None = None, edt_hashes: Sequence[str] | None = None) -> list[float]:
        x = self.embed(sources, edited, instructions, src_hashes, edt_hashes)
        return self.head.scores(x).tolist()

    def save(self, out: str | Path) -> Path:
        from safetensors.torch import save_file

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, str(out / "head.safetensors"))
        atomic_write(out / "config.json", lambda fh: json.dump(self.config, fh, indent=2))
        return out

    @classmethod
    def load(cls, path: str | Path, models: dict[str, str] | None = None, device: str = "auto",
             dtype: str = "auto") -> "FastScorer":
        from safetensors.torch import load_file

        from editlens.adiee.checkpoint import CheckpointError
        from editlens.models.encoders import get_encoder

        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.is_file() or not (path / "head.safetensors").is_file():
            raise ModelUnavailableError(f"{path}: not a fast ADIEE scorer (needs config.json and head.safetensors)")
        config = read_json(cfg_file, "a fast ADIEE scorer's config")
        if not isinstance(config, dict):
            raise CheckpointError(f"{cfg_file}: expected a JSON object, got {type(config).__name__}")
        if config.get("model_type") != "adiee_fast":
            raise CheckpointError(f"{cfg_file}: model_type is {config.get('model_type')!r}, not 'adiee_fast'")
        head = FastHead(int(config["feature_dim"]), int(config["hidden"]))
        state = load_file(str(path / "head.safetensors"))
        expected = head.state_dict()
        missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        mismatched = sorted(k for k in set(expected) & set(state) if expected[k].shape != state[k].shape)
        if missing or unexpected or mismatched:
            raise CheckpointError(f"{path}/head.safetensors does not match its config: missing {missing}, "
                                  f"unexpected {unexpected}, shape mismatch {mismatched}")
        head.load_state_dict(state)
        # the encoders follow the precision policy; their features reach the (float32) head as float32
        clip = get_encoder("clip", None, device, dtype, models)
        dino = get_encoder("dino", None, device, dtype, models)
        got = {"clip": _weights(clip), "dino": _weights(dino)}
        if config.get("encoder_weights") and got != config["encoder_weights"]:
            raise CheckpointError(f"{path}: trained on other CLIP/DINO weights than the ones given now "
                                  f"({config['encoder_weights']} vs {got}); its features would not mean the same")
        return cls(head, clip, dino, config)


def _weights(encoder: Any) -> Any:
    from editlens.models.fingerprint import fingerprint

    return fingerprint(encoder.mref).get("weights")


def train_fast(data_dir: str | Path, out: str | Path, models: dict[str, str] | None = None, epochs: int = 300,
               lr: float = 3e-3, hidden: int = 64, seed: int = 0, device: str = "auto",
               echo: Callable[[str], None] = print, dtype: str = "auto") -> dict[str, Any]:
    """Fit the head on the dataset's train split; report Spearman on its val split."""
    from editlens.adiee.train import read_dataset, spearman
    from editlens.core.images import load_image
    from editlens.models.encoders import get_encoder

    data_dir = Path(data_dir)
    rows = read_dataset(data_dir)
    clip = get_encoder("clip", None, device, dtype, models)
    dino = get_encoder("dino", None, device, dtype, models)
    scorer = FastScorer(FastHead(1), clip, dino, {})
    feats, ys, splits = [], [], []
    step = 32
    for s in range(0, len(rows), step):
        part = rows[s : s + step]
        src = [load_image(data_dir / r["source"])[0] for r in part]
        edt = [load_image(data_dir / r["edited"])[0] for r in part]
        feats.append(scorer.embed(src, edt, [r["instruction"] for r in part]))
        ys += [float(r["score"]) * 10 for r in part]
        splits += [r.get("split", "train") for r in part]
    x = torch.cat(feats)
    y = torch.tensor(ys)
    tr = torch.tensor([s == "train" for s in splits])
    va = ~tr
    if int(tr.sum()) == 0:
        raise InputError(f"{data_dir}: no training samples")
    torch.manual_seed(seed)
    head = FastHead(x.shape[1], hidden)
    opt = torch.optim.Adam(head.parameters(), lr=lr, weight_decay=1e-4)
    log = []
    for epoch in range(epochs):
        head.train()
        opt.zero_grad()
        loss = nn.functional.l1_loss(head.scores(x[tr]), y[tr])
        loss.backward()
        opt.step()
        log.append(float(loss.detach()))
        if epoch == 0 or (epoch + 1) % max(1, epochs // 5) == 0:
            echo(f"epoch {epoch + 1:>4}  train L1 {log[-1]:.4f}")
    head.eval()
    with torch.no_grad():
        val_pred = head.scores(x[va]).tolist() if int(va.sum()) else []
    config = {"model_type": "adiee_fast", "feature_dim": int(x.shape[1]), "hidden": hidden, "range": [0, 10],
              "epochs": epochs, "lr": lr, "seed": seed, "data": str(data_dir),
              "encoders": {"clip": clip.mref.ref, "dino": dino.mref.ref},
              "encoder_weights": {"clip": _weights(clip), "dino": _weights(dino)},
              "n_train": int(tr.sum()), "n_val": int(va.sum()),
              "val_spearman": spearman(val_pred, y[va].tolist()) if val_pred else None}
    FastScorer(head, clip, dino, config).save(out)
    return {"out": str(out), "first_loss": log[0], "last_loss": log[-1], "val_spearman": config["val_spearman"],
            "n_train": config["n_train"], "n_val": config["n_val"]}
