"""Randomly initialised image-*editing* pipelines of real architectures, for
``editlens make-tiny-editor``, the tests and the throughput benchmark: built
offline and saved laid out exactly like the real ones (``model_index.json``
naming the pipeline class, one folder per component), so they load through the same diffusers code path
a downloaded InstructPix2Pix, FLUX.1 Kontext or Qwen-Image-Edit folder takes.
Their outputs are noise: they check plumbing (batching, seeds, resume,
manifests), never quality.

* ``instruct-pix2pix``: ``StableDiffusionInstructPix2PixPipeline`` (UNet with
  8 input channels: noisy latents + the source image's latents).
* ``flux-kontext``: ``FluxKontextPipeline`` (CLIP + T5 text encoders, a
  one-block Flux transformer).
* ``qwen-image-edit``: ``QwenImageEditPipeline`` (a tiny Qwen2.5-VL as the
  text encoder, with its processor).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from editlens.models.random_init import clip_style_tokenizer

#: Sizes of the random InstructPix2Pix UNet: ``tiny`` for tests (~0.3M
#: parameters), ``realistic`` for the throughput benchmark (about 140M UNet
#: parameters: SD 1.5's layout at 128-256-512-512 channels instead of 320-640-1280-1280).
IP2P_SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(block_out_channels=(32, 64), layers_per_block=1, cross_attention_dim=32, attention_head_dim=8,
                 down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                 up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), text_hidden=32, text_layers=2, vae=(32, 64)),
    "realistic": dict(block_out_channels=(128, 256, 512, 512), layers_per_block=2, cross_attention_dim=768,
                      attention_head_dim=8,
                      down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                      up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3, text_hidden=768, text_layers=2,
                      vae=(32, 64, 64, 64)),
    # Stable Diffusion 1.5 / InstructPix2Pix at full size: 860M UNet parameters, the 12-layer CLIP ViT-L text
    # encoder, the 4-level 128-512 VAE (for speed figures on a GPU; random weights)
    "full": dict(block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, cross_attention_dim=768,
                 attention_head_dim=8,
                 down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                 up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3, text_hidden=768, text_layers=12,
                 vae=(128, 256, 512, 512)),
}


def build_instruct_pix2pix(out: Path | str, image_size: int = 64, seed: int = 0, size: str = "tiny") -> Path:
    """Save a random ``StableDiffusionInstructPix2PixPipeline`` to ``out``.

    ``image_size`` is the native resolution (the UNet's ``sample_size`` times
    the VAE's downscale); ``size`` picks :data:`IP2P_SIZES`.
    """
    import torch
    from diffusers import (
        AutoencoderKL,
        EulerAncestralDiscreteScheduler,
        StableDiffusionInstructPix2PixPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = IP2P_SIZES[size]
    down = 2 ** (len(cfg["vae"]) - 1)
    if image_size % 8:
        raise ValueError(f"image_size must be a multiple of 8, got {image_size}")
    out = Path(out)
    tok = clip_style_tokenizer()
    torch.manual_seed(seed)
    # 8 input channels: 4 noisy latents + 4 latents of the source image (InstructPix2Pix's conditioning)
    unet = UNet2DConditionModel(sample_size=image_size // down, in_channels=8, out_channels=4,
                                layers_per_block=cfg["layers_per_block"], block_out_channels=cfg["block_out_channels"],
                                down_block_types=cfg["down_block_types"], up_block_types=cfg["up_block_types"],
                                cross_attention_dim=cfg["cross_attention_dim"],
                                attention_head_dim=cfg["attention_head_dim"], norm_num_groups=32)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=cfg["vae"],
                        down_block_types=("DownEncoderBlock2D",) * len(cfg["vae"]),
                        up_block_types=("UpDecoderBlock2D",) * len(cfg["vae"]), layers_per_block=1,
                        norm_num_groups=32, sample_size=image_size)
    hidden = cfg["text_hidden"]
    text_encoder = CLIPTextModel(CLIPTextConfig(
        hidden_size=hidden, intermediate_size=hidden * 4 if hidden > 32 else 37, num_hidden_layers=cfg["text_layers"],
        num_attention_heads=4, vocab_size=len(tok), max_position_embeddings=77, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, projection_dim=hidden))
    # the released InstructPix2Pix sampler
    scheduler = EulerAncestralDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                                steps_offset=1)
    pipe = StableDiffusionInstructPix2PixPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tok, unet=unet,
                                                  scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                                  requires_safety_checker=False)
    pipe.save_pretrained(out)  # type: ignore[attr-defined]  # diffusers hides the DiffusionPipeline base from mypy
    return out


def _t5_tokenizer() -> Any:
    """A small unigram tokenizer with T5's special tokens, as a fast tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from editlens.models.random_init import CLIP_CORPUS as CORPUS

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator([s.lower() for s in CORPUS] * 4, trainer)
    from tokenizers import processors

    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=512)


def build_flux_kontext(out: Path | str, image_size: int = 32, seed: int = 0) -> Path:
    """Save a random ``FluxKontextPipeline`` to ``out`` (a one-channel VAE
    without downscaling and a one-block transformer: ``image_size`` px in a
    fraction of a second)."""
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        FluxKontextPipeline,
        FluxTransformer2DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    out = Path(out)
    tok = clip_style_tokenizer()
    tok2 = _t5_tokenizer()
    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, axes_dims_rope=[4, 4, 8])
    text_encoder = CLIPTextModel(CLIPTextConfig(
        hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, vocab_size=len(tok),
        max_position_embeddings=77, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, projection_dim=32))
    text_encoder_2 = T5EncoderModel(T5Config(vocab_size=len(tok2), d_model=32, d_kv=8, d_ff=37, num_layers=2,
                                             num_heads=4, pad_token_id=0, eos_token_id=1))
    vae = AutoencoderKL(sample_size=image_size, in_channels=3, out_channels=3, block_out_channels=(4,),
                        layers_per_block=1, latent_channels=1, norm_num_groups=1, use_quant_conv=False,
                        use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035)
    pipe = FluxKontextPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                               tokenizer=tok, text_encoder_2=text_encoder_2, tokenizer_2=tok2, transformer=transformer)
    pipe.save_pretrained(out)  # type: ignore[attr-defined]  # diffusers hides the DiffusionPipeline base from mypy
    return out


def build_qwen_image_edit(out: Path | str, image_size: int = 32, seed: int = 0) -> Path:
    """Save a random ``QwenImageEditPipeline`` to ``out`` (Qwen2.5-VL text
    encoder of width 16 with its processor, a two-layer transformer).

    Needs ``torchvision``: transformers' Qwen2-VL processor cannot be built without its video processor.
    """
    import importlib.util

    if importlib.util.find_spec("torchvision") is None:
        raise RuntimeError("the tiny qwen-image-edit pipeline needs torchvision (transformers' Qwen2-VL processor "
                           "requires its video processor): pip install torchvision")
    import torch
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageEditPipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessorPil,
        Qwen2VLProcessor,
    )

    from editlens.models.random_init import QWEN_TEMPLATE, train_tokenizer

    out = Path(out)
    tok = train_tokenizer(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|im_start|>",
                           "<|im_end|>"])
    tok.chat_template = QWEN_TEMPLATE
    torch.manual_seed(seed)
    rope = {"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 1000000.0}
    cfg = Qwen2_5_VLConfig(
        text_config=dict(hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=len(tok), rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]},
                         rope_parameters=rope, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id),
        vision_config=dict(depth=2, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))
    text_encoder = Qwen2_5_VLForConditionalGeneration(cfg)
    extra: dict[str, Any] = {}
    try:  # transformers builds a Qwen2-VL processor with its video processor where torchvision is installed
        from transformers import Qwen2VLVideoProcessor

        extra["video_processor"] = Qwen2VLVideoProcessor(patch_size=14, merge_size=2, temporal_patch_size=2)
    except (ImportError, ValueError, TypeError):
        pass
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessorPil(patch_size=14, merge_size=2,
                                                                          temporal_patch_size=2, min_pixels=28 * 28,
                                                                          max_pixels=56 * 56),
                                 tokenizer=tok, chat_template=QWEN_TEMPLATE, **extra)
    z_dim = 4
    vae = AutoencoderKLQwenImage(base_dim=z_dim * 6, z_dim=z_dim, dim_mult=[1, 2, 4], num_res_blocks=1,
                                 temperal_downsample=[False, True], latents_mean=[0.0] * z_dim,
                                 latents_std=[1.0] * z_dim)
    transformer = QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
                                              attention_head_dim=16, num_attention_heads=3, joint_attention_dim=16,
                                              guidance_embeds=False, axes_dims_rope=(8, 4, 4))
    pipe = QwenImageEditPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                                 tokenizer=tok, processor=processor, transformer=transformer)
    pipe.save_pretrained(out)  # type: ignore[attr-defined]  # diffusers hides the DiffusionPipeline base from mypy
    return out


#: ``--family`` of ``editlens make-tiny-editor`` -> builder.
TINY_EDITORS: dict[str, Callable[..., Path]] = {
    "instruct-pix2pix": build_instruct_pix2pix,
    "flux-kontext": build_flux_kontext,
    "qwen-image-edit": build_qwen_image_edit,
}


def make_tiny_editor(path: Path | str, family: str = "instruct-pix2pix", **kwargs: Any) -> Path:
    """Build a tiny random editing pipeline of ``family`` (:data:`TINY_EDITORS`) in ``path``.

    ``kwargs`` go to the builder (``image_size``, ``seed``; ``size`` for
    InstructPix2Pix). Loads with ``DiffusionPipeline.from_pretrained(path)``
    and with ``editlens edit --editor PATH``.
    """
    import inspect

    from editlens.core.io import write_json
    from editlens.editors.diffusers_editor import EDITOR_FILE
    from editlens.models.describe import write_description

    if family not in TINY_EDITORS:
        raise ValueError(f"unknown tiny editor family {family!r}; one of {', '.join(TINY_EDITORS)}")
    builder = TINY_EDITORS[family]
    out = Path(builder(path, **kwargs))
    native = int(kwargs.get("image_size") or inspect.signature(builder).parameters["image_size"].default)
    # the family's resolution (512-1024 px) would make a tiny VAE's latents huge: generate at the native size
    write_json(out / EDITOR_FILE, {"settings": {"resolution": native},
                                   "made_by": "editlens make-tiny-editor (random weights: noise, for plumbing)"})
    write_description(out, "editor", "editlens.editors.diffusers_editor:DiffusersEditor", family=family)
    return out
