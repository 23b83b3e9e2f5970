"""Tiny random DICE-style checkpoints for tests: a tiny Idefics3 saved as
"base + LoRA adapter" in the directory layout of the released DICE models.
Random ones answer noise (loading, prompting, parsing); programmed ones
(:func:`build_programmed_layout`) answer a given text with known
probabilities, for tests that compare verdicts and confidences."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

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


#: the LM-head weight of the programmed next token (its logit: about 5 x sqrt(hidden) = 28 on the tiny model,
#: far above every other token's 0, and coarse enough for bf16 to keep rivals' near-ties in order)
SURE = 5.0


def program_idefics3(model_dir: Path, starts: Sequence[int], chunks: Sequence[str],
                     rivals: dict[str, dict[str, float]] | None = None) -> Path:
    """Make the tiny Idefics3 in ``model_dir`` answer ``"".join(chunks)`` (then
    ``<end_of_utterance>``) after a prompt ending in any token of ``starts``:
    each chunk becomes a token; attention and MLP outputs are zeroed so the
    current token alone picks the next; the embedding and LM-head rows chain
    start -> chunk 1 -> ... -> end. Every other token's logit is 0 unless
    ``rivals`` names it: ``{chunk: {word: share}}`` gives the first token of
    ``word``, at the step that emits ``chunk``, ``share`` of the chosen token's
    logit (a near-tie: the model is unsure there, as a real one is)."""
    import torch
    from transformers import AutoProcessor, Idefics3ForConditionalGeneration

    proc = AutoProcessor.from_pretrained(str(model_dir))
    tok = proc.tokenizer
    tok.add_tokens([c for c in dict.fromkeys(chunks) if c not in tok.get_vocab()])
    model = Idefics3ForConditionalGeneration.from_pretrained(str(model_dir))
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    model.config.tie_word_embeddings = False
    text_config: Any = model.config.text_config
    text_config.tie_word_embeddings = False
    end = tok.convert_tokens_to_ids("<end_of_utterance>")
    chain = [tok.convert_tokens_to_ids(c) for c in chunks] + [end]
    if len(set(chain)) != len(chain) or set(chain) & set(starts):
        raise ValueError("program_idefics3: the chunks must be distinct tokens, other than the start tokens")
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    hidden = emb.shape[1]
    if len(chain) > hidden:
        raise ValueError(f"program_idefics3: at most {hidden - 1} chunks on a {hidden}-wide model")
    with torch.no_grad():
        head.weight = torch.nn.Parameter(head.weight.detach().clone())  # untied from the embeddings
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")) and "vision" not in name:
                p.zero_()
        head.weight.zero_()
        one_hot = torch.nn.functional.one_hot
        for t in starts:
            emb[t] = one_hot(torch.tensor(0), hidden).float()
        for i, t in enumerate(chain):
            emb[t] = one_hot(torch.tensor(i + 1), hidden).float()
        head.weight[chain[0]] = SURE * one_hot(torch.tensor(0), hidden).float()
        for i in range(len(chain) - 1):
            head.weight[chain[i + 1]] = SURE * one_hot(torch.tensor(i + 1), hidden).float()
        for chunk, words in (rivals or {}).items():
            if chunk not in chunks:  # another stage's
                continue
            at = list(chunks).index(chunk)  # the step emitting chunk ``at`` reads state ``at``
            for word, share in words.items():
                first = tok.encode(word, add_special_tokens=False)[0]
                head.weight[first] += SURE * share * one_hot(torch.tensor(at), hidden).float()
    model.save_pretrained(model_dir)
    proc.save_pretrained(model_dir)
    return model_dir


def last_prompt_tokens(model_dir: Path, conversations: Sequence[tuple[list[dict[str, Any]], bool]]) -> list[int]:
    """The last token of each (conversation, add_generation_prompt) as the model's processor renders it."""
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(str(model_dir))
    out = []
    for conv, agp in conversations:
        text = proc.apply_chat_template(conv, add_generation_prompt=agp, tokenize=False)
        out.append(proc.tokenizer.encode(text, add_special_tokens=False)[-1])
    return sorted(set(out))


def build_programmed_layout(root: Path, detector_answer: Sequence[str], coherence_answer: Sequence[str],
                            rivals: dict[str, dict[str, float]] | None = None) -> dict[str, tuple[Path, Path]]:
    """Tiny Idefics3 bases in the released layout whose detector answers
    ``"".join(detector_answer)`` and whose coherence estimator answers
    ``"".join(coherence_answer)`` (with or without the generation prompt),
    each with a LoRA adapter that changes nothing (B = 0): real models whose
    answers and probabilities are known, for engine-path equality tests."""
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from editlens.dice.lora import dice_lora_config
    from editlens.dice.prompt_sets import default_prompts
    from editlens.dice.released import coherence_conversation, detector_conversation
    from editlens.models.random_init import build_idefics3

    prompts = default_prompts()
    det_conv = detector_conversation(prompts)
    coh_conv = coherence_conversation(prompts, "add a hat", "ADD", "a hat")
    out = {}
    for role, (base_rel, adapter_rel) in RELEASED_LAYOUT.items():
        base, adapter = root / base_rel, root / adapter_rel
        base.mkdir(parents=True, exist_ok=True)
        build_idefics3(base)
        if role == "detector":
            starts = last_prompt_tokens(base, [(det_conv, True)])
            program_idefics3(base, starts, detector_answer, rivals)
        else:
            starts = last_prompt_tokens(base, [(coh_conv, False), (coh_conv, True)])
            program_idefics3(base, starts, coherence_answer, rivals)
        model = AutoModelForImageTextToText.from_pretrained(str(base), local_files_only=True)
        get_peft_model(model, dice_lora_config(r=8, alpha=16, dropout=0.0)).save_pretrained(str(adapter))
        out[role] = (base, adapter)
    return out
