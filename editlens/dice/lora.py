"""The LoRA configuration of the DICE paper (supplementary B): rank 64,
alpha 16, dropout 0.1 on the attention and MLP projections of the language
model only; the vision tower and the connector stay frozen."""

from __future__ import annotations

from typing import Any

#: language-model projections (Llama-style names, as in Idefics3's text model)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: peft matches a string target_modules as a full-name regex: only the text model's layers
TARGET_REGEX = r".*text_model\.layers\.\d+\.(self_attn|mlp)\.(" + "|".join(PROJECTIONS) + r")"


def dice_lora_config(r: int = 64, alpha: int = 16, dropout: float = 0.1, target: str = TARGET_REGEX) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target, bias="none",
                      task_type="CAUSAL_LM")


def check_lora_targets(model: Any) -> list[str]:
    """Names of the LoRA-wrapped modules; an error when none matched or any
    lies outside the language model (the vision tower must stay frozen)."""
    from editlens.errors import InputError

    names = [n for n, m in model.named_modules() if hasattr(m, "lora_A") and n.endswith(PROJECTIONS)]
    if not names:
        raise InputError("LoRA matched no language-model projection (q/k/v/o/gate/up/down_proj under text_model)")
    bad = [n for n in names if "text_model" not in n]
    if bad:
        raise InputError(f"LoRA reached modules outside the language model: {bad[:3]}")
    return names
