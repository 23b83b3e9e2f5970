"""Random CLIP checkpoints for the two-frame model's tests and benchmarks.

* :func:`build_clip` saves a random transformers CLIP (tiny, or the shape of
  ViT-B/16) with a tokenizer, loadable by ``load_twoframe``.
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

SIZES = {
    # width 64 keeps OpenAI's one-head-per-64-channels rule (heads are not stored in the weights)
    "tiny": dict(width=64, layers=2, mlp=96, image=32, patch=8, text_width=64, text_layers=2, embed=32, context=77),
    "vit-b-16": dict(width=768, layers=12, mlp=3072, image=224, patch=16, text_width=512, text_layers=12, embed=512,
                     context=77),
}
CORPUS = ["put a cat on the seat", "add a red hat", "remove the car", "make the sky blue", "a photo of a dog",
          "let there be a stream through the field", "move the box to the left", "turn the apple green"]


def small_tokenizer() -> Any:
    """A byte-level BPE with CLIP's special tokens, trained on a few sentences."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|startoftext|>", "<|endoftext|>", "<|unk|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    from tokenizers import processors

    bos, eos = tok.token_to_id("<|startoftext|>"), tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="<|startoftext|> $A <|endoftext|>",
                                                       special_tokens=[("<|startoftext|>", bos), ("<|endoftext|>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", unk_token="<|unk|>", model_max_length=77)


def clip_config(tokenizer: Any, size: str = "tiny") -> Any:
    """A :class:`CLIPConfig` of the given size whose vocabulary fits ``tokenizer``."""
    from transformers import CLIPConfig

    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    s = SIZES[size]
    ids = dict(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    return CLIPConfig(
        text_config=dict(hidden_size=s["text_width"], intermediate_size=s["mlp"] * s["text_width"] // s["width"],
                         num_hidden_layers=s["text_layers"], num_attention_heads=max(1, s["text_width"] // 64),
                         vocab_size=len(tokenizer), max_position_embeddings=s["context"], **ids),
        vision_config=dict(hidden_size=s["width"], intermediate_size=s["mlp"], num_hidden_layers=s["layers"],
                           num_attention_heads=max(1, s["width"] // 64), image_size=s["image"], patch_size=s["patch"]),
        projection_dim=s["embed"],
    )


def build_clip(out: str | Path, tokenizer: Any = None, size: str = "tiny", seed: int = 0) -> Path:
    """Save a random CLIP (transformers format) and its tokenizer to ``out``."""
    from transformers import AutoTokenizer, CLIPModel

    if tokenizer is None:
        tokenizer = small_tokenizer()
    elif isinstance(tokenizer, (str, Path)):
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
    cfg = clip_config(tokenizer, size)
    torch.manual_seed(seed)
    out = Path(out)
    CLIPModel(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


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
