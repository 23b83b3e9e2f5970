"""Build a tiny, randomly initialised Stable-Diffusion-style *inpainting*
pipeline offline and save it laid out exactly like a real one
(``model_index.json``, ``unet/`` with 9 input channels, ``vae/``,
``text_encoder/``, ``tokenizer/``, ``scheduler/``; no safety checker), so
tests load it through the same ``AutoPipelineForInpainting`` code path a real
SD-inpainting directory takes. Its outputs are noise: it checks plumbing
(sizes, seeds, compositing, the dataset builder), never quality.

Needs the optional ``diffusers`` package (``pip install editlens[inpaint]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# the tokenizer lives with the other random models (the CLI's make-tiny commands build it too)
from editlens.models.random_init import CLIP_CORPUS as CORPUS  # noqa: E402,F401
from editlens.models.random_init import clip_style_tokenizer  # noqa: E402,F401


def build_sd_inpaint(out: Path | str, image_size: int = 64, seed: int = 0, tokenizer: Any = None) -> Path:
    """Save a tiny random SD inpainting pipeline to ``out`` and return it.

    ``image_size`` is the pipeline's native resolution (its UNet's
    ``sample_size`` times the VAE's downscale of 2); 32-64 keeps a 2-step run
    well under a second on a CPU. ``tokenizer`` defaults to
    :func:`clip_style_tokenizer` (pass a real ``CLIPTokenizer`` when one is
    at hand); the text encoder's vocabulary is sized to it.
    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    if image_size % 8:
        raise ValueError(f"image_size must be a multiple of 8, got {image_size}")
    out = Path(out)
    tok = tokenizer if tokenizer is not None else clip_style_tokenizer()
    torch.manual_seed(seed)
    # 9 input channels: 4 noisy latents + 1 downsampled mask + 4 latents of the masked image
    unet = UNet2DConditionModel(sample_size=image_size // 2, in_channels=9, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
                                attention_head_dim=8, norm_num_groups=32)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        layers_per_block=1, norm_num_groups=32, sample_size=image_size)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, vocab_size=len(tok),
        max_position_embeddings=77, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, projection_dim=32))
    # SD's own schedule (scaled-linear betas), with DDIM as the sampler
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tok, unet=unet,
                                          scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                          requires_safety_checker=False)
    pipe.save_pretrained(out)  # type: ignore[attr-defined]  # diffusers hides the DiffusionPipeline base from mypy
    return out
