"""Embedding-space scores: cosine, CLIPScore, directional CLIP."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine similarity of two ``(N, D)`` embedding batches.

    >>> import torch
    >>> cosine(torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]])).round(decimals=4)
    tensor([0.7071])
    """
    if a.shape != b.shape:
        raise ValueError(f"embedding shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    return F.cosine_similarity(a.float(), b.float(), dim=-1, eps=1e-12)


def clipscore(image_emb: torch.Tensor, text_emb: torch.Tensor, w: float = 2.5) -> torch.Tensor:
    """CLIPScore of Hessel et al. (2021): ``w * max(cos, 0)`` with ``w = 2.5``.

    >>> import torch
    >>> clipscore(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]))
    tensor([0.])
    """
    return w * cosine(image_emb, text_emb).clamp_min(0.0)


def clip_directional(
    source_img: torch.Tensor, edited_img: torch.Tensor, source_txt: torch.Tensor, target_txt: torch.Tensor
) -> torch.Tensor:
    """Directional CLIP similarity (Gal et al., 2022; used by InstructPix2Pix).

    Cosine between the change of image embedding (edited - source) and the
    change of caption embedding (target - source). Embeddings are L2-normalised
    before the differences are taken, as in the reference implementations.

    An edit that changed nothing (zero image-embedding change) moved in no
    direction, so it moved *not at all* towards the caption change: its
    score is 0, the value of a failed edit, and it stays in means and
    correlations. Identical captions (zero caption change) leave nothing to
    compare with: the result is NaN, and the metric reports the sample as
    skipped with that reason.

    >>> import torch
    >>> e = torch.eye(3)
    >>> clip_directional(e[:1], e[1:2], e[:1], e[1:2]).round(decimals=4)  # same direction
    tensor([1.])
    >>> clip_directional(e[:1], e[:1], e[:1], e[1:2])  # nothing changed: a failed edit
    tensor([0.])
    """
    di = F.normalize(edited_img.float(), dim=-1) - F.normalize(source_img.float(), dim=-1)
    dt = F.normalize(target_txt.float(), dim=-1) - F.normalize(source_txt.float(), dim=-1)
    ni, nt = di.norm(dim=-1), dt.norm(dim=-1)
    out = (di * dt).sum(-1) / (ni * nt).clamp_min(1e-12)
    out = torch.where(ni > 1e-8, out, torch.zeros_like(out))
    return torch.where(nt > 1e-8, out, torch.full_like(out, float("nan")))
