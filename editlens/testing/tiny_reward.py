"""Small Qwen-VL models and reward-model checkpoints in exactly the released
layouts, built offline for tests and benchmarks:

* :func:`build_qwen_vl` — a random Qwen2.5-VL or Qwen3-VL (``tiny``, or a
  ``0.5b`` model of realistic size for benchmarks) with tokenizer, image
  processor and chat template;
* :func:`build_editscore` — a base plus a PEFT LoRA adapter folder as
  EditScore releases it (``adapter_config.json`` with a LLaMA-Factory-style
  target regex that leaves the vision tower alone,
  ``adapter_model.safetensors``);
* :func:`build_editreward` — a folder holding only ``model.safetensors`` as
  EditReward releases it: backbone keys, ``rm_heads.head_{0,1}.{0,3,5}``
  heads (hidden->1024->16->2) and embeddings resized for ``<|Reward|>``,
  which the base's tokenizer lacks;
* :func:`program_answer` — make a model answer a fixed text whatever it is
  shown (attention and MLP outputs zeroed, so each token's embedding alone
  picks the next: a chain through added tokens). Its answers are the
  model's own generations, used to reach the parsing and scoring paths
  that a random model never reaches (a random model answers noise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from editlens.models.random_init import QWEN_TEMPLATE, _text, train_tokenizer

SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|im_start|>", "<|im_end|>"]
#: an EditScore answer in the released format: SC or PQ [20, 25] on the 0-25 scale (two chunks: one new
#: token cut it off mid-JSON)
GOOD_ANSWER = ('{"reasoning": "the hat is there", ', '"score": [20, 25]}')
#: LLaMA-Factory's way of naming LoRA targets on a multimodal model: every
#: language-model linear layer, nothing under the vision tower
ADAPTER_TARGETS = r"^(?!.*visual).*(?:q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"


def build_qwen_vl(out: Path, family: str = "qwen2_5_vl", size: str = "tiny", seed: int = 0) -> Path:
    """A random Qwen2.5-VL (``family="qwen2_5_vl"``) or Qwen3-VL saved with its
    tokenizer, image processor (pixel bounds wide enough for 256 x factor^2
    images) and a Qwen-style chat template. ``size``: ``tiny`` (hidden 32,
    2 layers, patch 8) or ``0.5b`` (Qwen2-0.5B's text model with an untied LM
    head, an 8-block 1280-wide vision tower at patch 14: 0.82 B parameters)."""
    import torch
    import transformers
    from transformers import Qwen2VLImageProcessorPil

    tok = train_tokenizer(SPECIALS)
    ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
    if size == "tiny":
        text = _text(32, 2, 2, 2, 37, len(tok), tok)
        patch, hid, vdepth, vint, vheads = 8, 32, 2, 37, 2
        mrope = [4, 2, 2]
    elif size == "0.5b":
        text = _text(896, 24, 14, 2, 4864, 151936, tok)
        patch, hid, vdepth, vint, vheads = 14, 1280, 8, 3420, 16
        mrope = [8, 12, 12]  # half the head dim (896 / 14 = 64)
    else:
        raise ValueError(f"unknown size {size!r}")
    common = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                  vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
                  tie_word_embeddings=False)
    rope = {"rope_type": "default", "mrope_section": mrope, "rope_theta": 10000.0}
    torch.manual_seed(seed)
    model: transformers.PreTrainedModel
    if family == "qwen2_5_vl":
        model = transformers.Qwen2_5_VLForConditionalGeneration(transformers.Qwen2_5_VLConfig(
            text_config={**text, "rope_parameters": rope},
            vision_config=dict(depth=vdepth, hidden_size=hid, intermediate_size=vint, num_heads=vheads,
                               patch_size=patch, spatial_merge_size=2, temporal_patch_size=2, in_channels=3,
                               out_hidden_size=text["hidden_size"], window_size=patch * 8,
                               fullatt_block_indexes=[vdepth - 1]), **common))
        mean = std = None
    elif family == "qwen3_vl":
        head_dim = text["hidden_size"] // text["num_attention_heads"]
        model = transformers.Qwen3VLForConditionalGeneration(transformers.Qwen3VLConfig(
            text_config={**text, "head_dim": head_dim, "rope_parameters": {**rope, "mrope_interleaved": True}},
            vision_config=dict(depth=vdepth, hidden_size=hid, intermediate_size=vint, num_heads=vheads,
                               patch_size=patch, spatial_merge_size=2, temporal_patch_size=2,
                               out_hidden_size=text["hidden_size"], num_position_embeddings=256,
                               deepstack_visual_indexes=[0]), **common))
        mean = std = [0.5, 0.5, 0.5]
    else:
        raise ValueError(f"unknown family {family!r}")
    model.save_pretrained(out)
    tok.chat_template = QWEN_TEMPLATE
    tok.save_pretrained(out)
    factor = patch * 2
    kw: dict[str, Any] = {"image_mean": mean, "image_std": std} if mean else {}
    Qwen2VLImageProcessorPil(patch_size=patch, merge_size=2, temporal_patch_size=2, min_pixels=4 * factor * factor,
                             max_pixels=1024 * factor * factor, **kw).save_pretrained(out)
    (out / "chat_template.jinja").write_text(QWEN_TEMPLATE)
    return out


def program_answer(model_dir: Path, chunks: Sequence[str]) -> Path:
    """Make the model in ``model_dir`` answer ``"".join(chunks)`` (then stop)
    to any prompt ending like Qwen's generation prompt. Each chunk becomes
    an added token; attention and MLP outputs are zeroed so the last token
    alone picks the next, and the embedding/LM-head rows chain
    ``"\\n" -> chunk 1 -> ... -> chunk n -> end of text``. ``chunks=[]`` answers
    nothing (an empty answer)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    new = [c for c in chunks if c not in tok.get_vocab()]
    tok.add_tokens(list(dict.fromkeys(new)))
    cfg = AutoConfig.from_pretrained(str(model_dir))
    cls = getattr(transformers, cfg.architectures[0])
    model = cls.from_pretrained(str(model_dir))
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    start = tok.encode(QWEN_TEMPLATE_END, add_special_tokens=False)[-1]
    chain = [start] + [tok.convert_tokens_to_ids(c) for c in chunks] + [tok.eos_token_id]
    if len(set(chain)) != len(chain):
        raise ValueError("program_answer: the chunks must be distinct tokens, other than the prompt's last one")
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    hidden = emb.shape[1]
    if len(chain) > hidden:
        raise ValueError(f"program_answer: at most {hidden - 1} chunks on a {hidden}-wide model")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")) and "visual" not in name:
                p.zero_()
        head.zero_()
        for i, t in enumerate(chain):
            emb[t] = torch.nn.functional.one_hot(torch.tensor(i), hidden).float()
            if i + 1 < len(chain):
                head[chain[i + 1]] = 50.0 * torch.nn.functional.one_hot(torch.tensor(i), hidden).float()
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return model_dir


#: how the generation prompt ends (the chain starts at its last token)
QWEN_TEMPLATE_END = "<|im_start|>assistant\n"


def build_editscore(root: Path, family: str = "qwen2_5_vl", answer: Sequence[str] | None = None, rank: int = 4,
                    old_key_names: bool = False, base: Path | None = None) -> tuple[Path, Path]:
    """``(base, adapter)`` folders in EditScore's released layout. ``answer``:
    chunks the model answers (see :func:`program_answer`); ``None`` leaves
    the base random. ``old_key_names`` writes adapter keys as transformers
    4.51 and earlier named Qwen-VL modules (``model.layers...``). ``base``: an
    existing base folder to put the adapter on (nothing is built)."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    if base is None:
        base = build_qwen_vl(root / "base", family)
        if answer is not None:
            program_answer(base, answer)
    cfg = transformers.AutoConfig.from_pretrained(str(base))
    model = getattr(transformers, cfg.architectures[0]).from_pretrained(str(base))
    lora = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=ADAPTER_TARGETS,
                      base_model_name_or_path=str(base))
    peft_model = get_peft_model(model, lora)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:  # LoRA starts as a no-op: a trained adapter is not
                # programmed answers run on o_proj/down_proj being zero: leave those adapters a no-op
                if answer is None or not any(x in name for x in ("o_proj", "down_proj")):
                    p.normal_(0, 0.02)
    adapter = root / "adapter"
    peft_model.save_pretrained(str(adapter))
    if old_key_names:
        from safetensors.torch import load_file, save_file

        f = adapter / "adapter_model.safetensors"
        sd = load_file(str(f))
        renamed = {k.replace("base_model.model.model.language_model.", "base_model.model.model."): v
                   for k, v in sd.items()}
        save_file(renamed, str(f), metadata={"format": "pt"})
    return base, adapter


def build_editreward(root: Path, family: str = "qwen2_5_vl", old_key_names: bool = False, head_width: int = 1024,
                     seed: int = 0, base: Path | None = None) -> tuple[Path, Path]:
    """``(base, checkpoint)``: a base model whose tokenizer lacks
    ``<|Reward|>``, and a folder with only ``model.safetensors`` in
    EditReward's released layout (weights of the backbone with embeddings
    resized for ``<|Reward|>``, and the two reward heads). ``base``: an existing
    base folder (nothing is built)."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    base = base or build_qwen_vl(root / "base", family, seed=seed)
    tok = AutoTokenizer.from_pretrained(str(base))
    tok.add_tokens([AddedToken("<|Reward|>", special=True, normalized=False)], special_tokens=True)
    cfg = transformers.AutoConfig.from_pretrained(str(base))
    model = getattr(transformers, cfg.architectures[0]).from_pretrained(str(base))
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    torch.manual_seed(seed + 1)
    with torch.no_grad():
        model.get_input_embeddings().weight[-1].normal_(0, 0.5)  # the trained <|Reward|> embedding
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    hidden = cfg.text_config.hidden_size
    for h in (0, 1):
        layers = [torch.nn.Linear(hidden, head_width), torch.nn.Linear(head_width, 16), torch.nn.Linear(16, 2)]
        for idx, layer in zip((0, 3, 5), layers):
            sd[f"rm_heads.head_{h}.{idx}.weight"] = layer.weight.detach().float().contiguous()
            sd[f"rm_heads.head_{h}.{idx}.bias"] = layer.bias.detach().float().contiguous()
    if old_key_names:
        sd = {(k.replace("model.language_model.", "model.", 1) if k.startswith("model.language_model.")
               else k.replace("model.visual.", "visual.", 1) if k.startswith("model.visual.") else k): v
              for k, v in sd.items()}
    ckpt = root / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    return base, ckpt


def state_dict_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def tiny_edits(n: int, seed: int = 0, size: tuple[int, int] = (40, 48)) -> list[Any]:
    """``n`` random (source, edited) uint8 pairs sharing one source."""
    import numpy as np

    rng = np.random.default_rng(seed)
    src = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    return [(src, rng.integers(0, 256, (*size, 3), dtype=np.uint8)) for _ in range(n)]
