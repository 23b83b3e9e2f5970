"""Random CLIP checkpoints for the two-frame model's tests and benchmarks.

* :func:`editlens.models.random_init.build_clip` saves
  a random transformers CLIP (tiny, or the shape of ViT-B/16) with a
  tokenizer, loadable by ``load_twoframe``.
* :func:`write_original_checkpoint` writes a CLIP in the original OpenAI
  layout, as a ViFi-CLIP training run saves it: a ``.pth`` whose ``model``
  entry has ``module.``-prefixed keys (``style="vifi"``: ViFi's wrapper names,
  prompt-learner buffers, no token embedding; ``style="clip"``: plain
  ``visual.*``/``transformer.*`` names).
* :func:`reference_forward` computes CLIP image and text embeddings straight
  from original-layout tensors, independently of transformers, so the layout
  mapping is checked against the original architecture, not against itself.

Outputs of these models are noise; they exist to exercise real code paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from editlens.models.random_init import clip_config, small_tokenizer


def random_twoframe(size: str = "tiny", mode: str = "faithful", seed: int = 0) -> Any:
    """An in-memory random :class:`~editlens.twoframe.model.TwoFrameModel` (benchmarks: no disk round trip)."""
    from transformers import CLIPModel

    from editlens.twoframe.model import TemporalHead, TwoFrameModel
    from editlens.twoframe.preprocess import FramePreprocess

    tok = small_tokenizer()
    torch.manual_seed(seed)
    clip = CLIPModel(clip_config(tok, size)).eval()
    head = TemporalHead(clip.config.projection_dim) if mode == "order" else None
    return TwoFrameModel(clip, tok, FramePreprocess.for_size(clip.config.vision_config.image_size), mode, head)


def write_original_checkpoint(clip: Any, path: str | Path, style: str = "vifi") -> Path:
    """Save ``clip`` (a transformers CLIPModel) as an original-layout ``.pth``."""
    from editlens.twoframe.layout import hf_to_original

    orig = hf_to_original(clip.state_dict())
    if style == "vifi":
        weights: dict[str, torch.Tensor] = {}
        for k, v in orig.items():
            if k == "token_embedding.weight":
                continue  # ViFi's prompt learner used it at start-up only; it is not in the module tree
            if k.startswith("visual."):
                weights["image_encoder." + k[len("visual."):]] = v
            elif k == "logit_scale":
                weights[k] = v
            else:
                weights["text_encoder." + k] = v
        width = orig["token_embedding.weight"].shape[1]
        weights["prompt_learner.token_prefix"] = torch.randn(3, 1, width)
        weights["prompt_learner.token_suffix"] = torch.randn(3, 76, width)
    elif style == "clip":
        weights = dict(orig)
    else:
        raise ValueError(f"style must be 'vifi' or 'clip', got {style!r}")
    path = Path(path)
    torch.save({"model": {f"module.{k}": v.clone() for k, v in weights.items()}, "epoch": 1}, path)
    return path


def _block(x: torch.Tensor, sd: dict[str, torch.Tensor], pre: str, heads: int, mask: torch.Tensor | None) -> torch.Tensor:
    b, n, w = x.shape
    h = F.layer_norm(x, (w,), sd[pre + "ln_1.weight"], sd[pre + "ln_1.bias"], 1e-5)
    q, k, v = F.linear(h, sd[pre + "attn.in_proj_weight"], sd[pre + "attn.in_proj_bias"]).chunk(3, dim=-1)
    split = lambda t: t.view(b, n, heads, w // heads).transpose(1, 2)  # noqa: E731
    att = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
    x = x + F.linear(att.transpose(1, 2).reshape(b, n, w), sd[pre + "attn.out_proj.weight"], sd[pre + "attn.out_proj.bias"])
    h = F.layer_norm(x, (w,), sd[pre + "ln_2.weight"], sd[pre + "ln_2.bias"], 1e-5)
    h = F.linear(h, sd[pre + "mlp.c_fc.weight"], sd[pre + "mlp.c_fc.bias"])
    h = h * torch.sigmoid(1.702 * h)  # QuickGELU
    return x + F.linear(h, sd[pre + "mlp.c_proj.weight"], sd[pre + "mlp.c_proj.bias"])


@torch.no_grad()
def reference_forward(sd: dict[str, torch.Tensor], pixels: torch.Tensor, input_ids: torch.Tensor, eos_token_id: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """OpenAI CLIP's ``encode_image`` and ``encode_text`` from original-layout tensors."""
    conv = sd["visual.conv1.weight"]
    width, patch = conv.shape[0], conv.shape[-1]
    x = F.conv2d(pixels, conv, stride=patch).flatten(2).transpose(1, 2)
    x = torch.cat([sd["visual.class_embedding"].expand(x.shape[0], 1, width), x], dim=1) + sd["visual.positional_embedding"]
    x = F.layer_norm(x, (width,), sd["visual.ln_pre.weight"], sd["visual.ln_pre.bias"], 1e-5)
    n_vis = len({k.split(".")[3] for k in sd if k.startswith("visual.transformer.resblocks.")})
    for i in range(n_vis):
        x = _block(x, sd, f"visual.transformer.resblocks.{i}.", max(1, width // 64), None)
    image = F.layer_norm(x[:, 0], (width,), sd["visual.ln_post.weight"], sd["visual.ln_post.bias"], 1e-5) @ sd["visual.proj"]

    tw = sd["token_embedding.weight"].shape[1]
    n = input_ids.shape[1]
    t = sd["token_embedding.weight"][input_ids] + sd["positional_embedding"][:n]
    causal = torch.full((n, n), float("-inf")).triu(1)
    n_txt = len({k.split(".")[2] for k in sd if k.startswith("transformer.resblocks.")})
    for i in range(n_txt):
        t = _block(t, sd, f"transformer.resblocks.{i}.", max(1, tw // 64), causal)
    t = F.layer_norm(t, (tw,), sd["ln_final.weight"], sd["ln_final.bias"], 1e-5)
    eot = (input_ids == eos_token_id).int().argmax(dim=1)  # first end-of-text token
    text = t[torch.arange(t.shape[0]), eot] @ sd["text_projection"]
    return image, text
