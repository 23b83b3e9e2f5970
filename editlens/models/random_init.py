"""Random, untrained models of real architectures, built offline and saved
with their processors: the tiny VLMs of `editlens make-tiny-vlm` and the CLIP
of `editlens twoframe random-model` (smoke runs of `serve` and the
evaluators), and the models of the tests and benchmarks, which load them
through editlens' real loading code. Their outputs are noise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CORPUS = ["ADD: a cat, [0.1, 0.2, 0.3, 0.4]", "REMOVE: the dog, [0.5, 0.5, 0.9, 0.9]", "EDIT: the sky",
          "YES", "NO", '{"score": [7, 8], "reasoning": "fine"}', "a photo of a red car on a street",
          "User: Assistant: system user assistant"]


def train_tokenizer(specials: list[str], vocab_size: int = 400) -> Any:
    """A byte-level BPE trained on a few sentences, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>", "<pad>"] + specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", additional_special_tokens=specials)


IDEFICS3_TEMPLATE = ("{% for message in messages %}{{ message['role'] | capitalize }}:{% for c in message['content'] %}"
                     "{% if c['type'] == 'image' %}<image>{% else %} {{ c['text'] }}{% endif %}{% endfor %}"
                     "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}")
QWEN_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% for c in message['content'] %}"
                 "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}"
                 "{% endif %}{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")
LLAVA_TEMPLATE = ("{% for message in messages %}{{ message['role'] | upper }}: {% for c in message['content'] %}"
                  "{% if c['type'] == 'image' %}<image>\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n"
                  "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}")


def _text(hidden: int, layers: int, heads: int, kv: int, inter: int, vocab: int, tok: Any, **extra: Any) -> dict:
    return dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, vocab_size=vocab, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, **extra)


def build_idefics3(out: Path, size: str = "tiny") -> Path:
    """``size="tiny"``: hidden 32, 2 layers. ``"small"``: the tiny vision
    tower with a 256-wide 4-layer text model (about 4M parameters: its compute
    shows next to Python's overhead). ``"smolvlm-256m"``: the architecture of
    SmolVLM-256M (SigLIP-base-like 93M vision tower at 512 px, a 576-wide
    30-layer text model), random weights."""
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
    )

    specials = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
        f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    tok = train_tokenizer(specials)
    if size == "tiny":
        vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                      patch_size=8)
        text = _text(32, 2, 2, 2, 37, len(tok), tok)
        scale, image_px = 2, 32
    elif size == "small":
        vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                      patch_size=8)
        text = _text(256, 4, 4, 4, 688, len(tok), tok)
        scale, image_px = 2, 32
    elif size == "smolvlm-256m":
        vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                      image_size=512, patch_size=16)
        text = _text(576, 30, 9, 3, 1536, 49280, tok)
        scale, image_px = 4, 512
    else:
        raise ValueError(f"unknown size {size!r}")
    seq_len = (image_px // vision["patch_size"]) ** 2 // scale**2
    cfg = Idefics3Config(vision_config=vision, text_config=text, scale_factor=scale,
                         image_token_id=tok.convert_tokens_to_ids("<image>"))
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(cfg)
    ip = Idefics3ImageProcessorPil(do_image_splitting=False, size={"longest_edge": image_px},
                                   max_image_size={"longest_edge": image_px})
    proc = Idefics3Processor(image_processor=ip, tokenizer=tok, image_seq_len=seq_len, chat_template=IDEFICS3_TEMPLATE)
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


def build_qwen2_vl(out: Path) -> Path:
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessorPil

    tok = train_tokenizer(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|im_start|>",
                           "<|im_end|>"])
    rope = {"rope_type": "default", "mrope_section": [4, 2, 2], "rope_theta": 10000.0}
    cfg = Qwen2VLConfig(
        text_config=_text(32, 2, 2, 2, 37, len(tok), tok, rope_scaling={"type": "mrope", "mrope_section": [4, 2, 2]},
                          rope_parameters=rope),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=2, patch_size=8, spatial_merge_size=2,
                           temporal_patch_size=2, in_channels=3),
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"), video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))
    torch.manual_seed(0)
    Qwen2VLForConditionalGeneration(cfg).save_pretrained(out)
    tok.chat_template = QWEN_TEMPLATE
    tok.save_pretrained(out)
    Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32,
                             max_pixels=64 * 64).save_pretrained(out)
    (out / "chat_template.jinja").write_text(QWEN_TEMPLATE)
    return out


def build_llava_next(out: Path) -> Path:
    import torch
    from transformers import (
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextImageProcessorPil,
        LlavaNextProcessor,
    )

    tok = train_tokenizer(["<image>"])
    pinpoints = [[32, 32], [32, 64], [64, 32]]
    cfg = LlavaNextConfig(
        vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                           num_attention_heads=2, image_size=32, patch_size=8, projection_dim=32),
        text_config=dict(model_type="llama", **_text(32, 2, 2, 2, 37, len(tok), tok)),
        image_token_index=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=pinpoints, vision_feature_layer=-1)
    torch.manual_seed(0)
    LlavaNextForConditionalGeneration(cfg).save_pretrained(out)
    ip = LlavaNextImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                    image_grid_pinpoints=pinpoints)
    LlavaNextProcessor(image_processor=ip, tokenizer=tok, patch_size=8, vision_feature_select_strategy="default",
                       chat_template=LLAVA_TEMPLATE, num_additional_image_tokens=1).save_pretrained(out)
    return out


BUILDERS = {"idefics3": build_idefics3, "qwen2_vl": build_qwen2_vl, "llava_next": build_llava_next}


#: Sizes of the random CLIPs (the two-frame model's towers).
CLIP_SIZES = {
    # width 64 keeps OpenAI's one-head-per-64-channels rule (heads are not stored in the weights)
    "tiny": dict(width=64, layers=2, mlp=96, image=32, patch=8, text_width=64, text_layers=2, embed=32, context=77),
    "vit-b-16": dict(width=768, layers=12, mlp=3072, image=224, patch=16, text_width=512, text_layers=12, embed=512,
                     context=77),
}
CLIP_CORPUS = ["put a cat on the seat", "add a red hat", "remove the car", "make the sky blue", "a photo of a dog",
          "let there be a stream through the field", "move the box to the left", "turn the apple green"]


def small_tokenizer() -> Any:
    """A byte-level BPE with CLIP's special tokens, trained on a few sentences."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|startoftext|>", "<|endoftext|>", "<|unk|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CLIP_CORPUS * 4, trainer)
    from tokenizers import processors

    bos, eos = tok.token_to_id("<|startoftext|>"), tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="<|startoftext|> $A <|endoftext|>",
                                                       special_tokens=[("<|startoftext|>", bos), ("<|endoftext|>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", unk_token="<|unk|>", model_max_length=77)


def clip_config(tokenizer: Any, size: str = "tiny") -> Any:
    """A :class:`CLIPConfig` of the given size whose vocabulary fits ``tokenizer``."""
    from transformers import CLIPConfig

    if size not in CLIP_SIZES:
        raise ValueError(f"size must be one of {sorted(CLIP_SIZES)}, got {size!r}")
    s = CLIP_SIZES[size]
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
    import torch

    cfg = clip_config(tokenizer, size)
    torch.manual_seed(seed)
    out = Path(out)
    CLIPModel(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


#: A few sentences for the CLIP-style tokenizer's merges (prompts the tiny diffusion pipelines use).
CLIP_CORPUS = ["background, empty scene", "a photo of a cat", "a photo of a dog on a sofa", "a red square",
               "a green disc", "a blue triangle", "a yellow bar", "object, person, text, watermark"]


def clip_style_tokenizer(vocab_size: int = 600) -> Any:
    """A ``CLIPTokenizer`` with CLIP's layout (256 byte symbols, the same with
    the ``</w>`` end-of-word mark, BPE merges, then ``<|startoftext|>`` and
    ``<|endoftext|>``), its merges trained on a few sentences in ~0.1 s.

    >>> tok = clip_style_tokenizer()
    >>> tok.convert_ids_to_tokens(tok("a photo").input_ids)
    ['<|startoftext|>', 'a</w>', 'photo</w>', '<|endoftext|>']
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>"))
    # CLIP splits words first, then maps bytes to printable symbols
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, end_of_word_suffix="</w>",
                                  show_progress=False)
    bpe.train_from_iterator([s.lower() for s in CLIP_CORPUS] * 4, trainer)
    merges = [tuple(m) for m in json.loads(bpe.to_str())["model"]["merges"]]
    vocab: dict[str, int] = {}
    for piece in [*alphabet, *(c + "</w>" for c in alphabet), *(a + b for a, b in merges),
                  "<|startoftext|>", "<|endoftext|>"]:
        vocab.setdefault(piece, len(vocab))
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)  # type: ignore[arg-type]  # pairs are accepted
