"""Tiny random DICE-style checkpoints for tests: a tiny Idefics3 saved as
"base + LoRA adapter" in the directory layout of the released DICE models.
Their answers are noise; they exercise loading, prompting and parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: (base folder, adapter folder) of each released model, relative to a root
RELEASED_LAYOUT = {
    "detector": ("DICE_differencedet_Idefics/model_based_tuned_stage1/image_first_after15k_after_lvis_idefics",
                 "DICE_differencedet_Idefics/lora_tuned_stage2/checkpoint-15000"),
    "coherence": ("Idefics3-8B-Llama3", "DICE_coherence_Idefics/lora_tuned/checkpoint-550"),
}


def save_random_adapter(base_dir: Path, out: Path, seed: int = 0, r: int = 8) -> Path:
    """A LoRA adapter (paper targets) on the model at ``base_dir`` with random,
    non-zero A and B matrices (so it changes the model), saved with peft."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from editlens.dice.lora import dice_lora_config

    model = AutoModelForImageTextToText.from_pretrained(str(base_dir), local_files_only=True)
    peft_model = get_peft_model(model, dice_lora_config(r=r, alpha=16, dropout=0.0))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    peft_model.save_pretrained(str(out))
    return out


def build_released_layout(root: Path) -> dict[str, tuple[Path, Path]]:
    """Tiny Idefics3 bases and adapters under ``root`` in the released layout;
    returns role -> (base dir, adapter dir)."""
    from editlens.models.random_init import build_idefics3

    out = {}
    for k, (role, (base_rel, adapter_rel)) in enumerate(RELEASED_LAYOUT.items()):
        base, adapter = root / base_rel, root / adapter_rel
        base.mkdir(parents=True, exist_ok=True)
        build_idefics3(base)
        save_random_adapter(base, adapter, seed=k)
        out[role] = (base, adapter)
    return out


def build_trainable_idefics3(out: Path, lm_head_scale: float = 40.0) -> Path:
    """The tiny Idefics3 of :func:`build_idefics3` with its (frozen, random)
    output layer scaled up: at the default init (std 0.02) a hidden-32 model's
    logits stay within a fraction of a unit, so no LoRA on the layers below
    can make it answer confidently. Scaled, a few dozen LoRA steps memorise an
    answer, which is what the training tests need."""
    import torch
    from transformers import AutoModelForImageTextToText

    from editlens.models.random_init import build_idefics3

    build_idefics3(out)
    model = AutoModelForImageTextToText.from_pretrained(str(out), local_files_only=True)
    with torch.no_grad():
        model.lm_head.weight.mul_(lm_head_scale)
    model.save_pretrained(str(out))
    return out


def build_owlv2(out: Path, tokenizer: Any) -> Path:
    """A tiny random OWLv2 (hidden 32) with the given CLIP tokenizer, saved
    with its processor files, for the stage-1 verification hook."""
    import torch
    from transformers import Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessorPil

    cfg = Owlv2Config(
        text_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                         vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, max_position_embeddings=16),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=32)
    torch.manual_seed(0)
    Owlv2ForObjectDetection(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    Owlv2ImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(out)
    return out
