"""Tiny random CLIP and DINOv2 encoders for ADIEE's tests and offline
end-to-end runs (features of such models are noise, but every code path is
the real one). Vision-language models come from
:mod:`editlens.models.random_init`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _clip_tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|startoftext|>", "<|endoftext|>", "<|unk|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["a photo of a cat", "a dog on a sofa", "make the sky blue", "add a red hat"] * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", unk_token="<|unk|>", model_max_length=77)


def build_tiny_clip(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel

    tok = _clip_tokenizer()
    torch.manual_seed(seed)
    cfg = CLIPConfig(
        text_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                         vocab_size=len(tok), max_position_embeddings=77, eos_token_id=tok.eos_token_id,
                         bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16)
    CLIPModel(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(out)
    return out


def build_tiny_dino(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import BitImageProcessorPil, Dinov2Config, Dinov2Model

    torch.manual_seed(seed)
    cfg = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       image_size=32, patch_size=8)
    Dinov2Model(cfg).save_pretrained(out)
    BitImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                         image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(out)
    return out


def build_all(root: Path) -> dict[str, Path]:
    """Tiny CLIP, DINOv2 and LLaVA-NeXT / Qwen2-VL base models under ``root``."""
    from editlens.models.random_init import build_llava_next, build_qwen2_vl

    return {"clip": build_tiny_clip(root / "clip"), "dino": build_tiny_dino(root / "dino"),
            "llava_next": build_llava_next(root / "llava_next"), "qwen2_vl": build_qwen2_vl(root / "qwen2_vl")}


if __name__ == "__main__":  # python -m editlens.testing.tiny_adiee DIR
    import sys

    for name, path in build_all(Path(sys.argv[1])).items():
        print(f"{name}={path}")


def build_llava_next_sized(out: Path, size: str = "tiny") -> Path:
    """LLaVA-NeXT with random weights. ``"tiny"``: the test model of
    :func:`editlens.models.random_init.build_llava_next`. ``"0.5b"``: about
    0.45B parameters (a CLIP-B/14-like 86M vision tower at 336 px, a 24-layer
    1024-wide Llama text model), tiles of 336 px as in LLaVA-NeXT, so a
    1024x512 side-by-side pair becomes a base view plus two tiles."""
    import torch
    from transformers import (
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessorPil,
        LlavaNextProcessor,
    )

    from editlens.models.random_init import LLAVA_TEMPLATE, build_llava_next, train_tokenizer

    if size == "tiny":
        return build_llava_next(out)
    if size != "0.5b":
        raise ValueError(f"unknown size {size!r}; use tiny or 0.5b")
    tok = train_tokenizer(["<image>"])
    pinpoints = [[336, 672], [672, 336], [672, 672], [336, 1008], [1008, 336]]
    cfg = LlavaNextConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                           num_attention_heads=12, image_size=336, patch_size=14, projection_dim=768),
        text_config=dict(model_type="llama", hidden_size=1024, intermediate_size=3072, num_hidden_layers=24,
                         num_attention_heads=16, num_key_value_heads=8, vocab_size=32000,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id),
        image_token_index=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=pinpoints, vision_feature_layer=-2)
    torch.manual_seed(0)
    LlavaNextForConditionalGeneration(cfg).save_pretrained(out)
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
                                    image_grid_pinpoints=pinpoints)
    LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=14, vision_feature_select_strategy="default",
                       chat_template=LLAVA_TEMPLATE, num_additional_image_tokens=1).save_pretrained(out)
    return out
