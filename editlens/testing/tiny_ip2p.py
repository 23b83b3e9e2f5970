"""A tiny random InstructPix2Pix pipeline for tests, built offline.

Stop-gap until ``editlens.testing.tiny_editors.make_tiny_editor`` (the
editors work) is merged; same layout as a real IP2P/MagicBrush folder
(``model_index.json``, ``unet/`` with 8 input channels, ``vae/``,
``text_encoder/``, ``tokenizer/``, ``scheduler/``), random weights.
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_ip2p(out: Path | str, image_size: int = 16, seed: int = 0) -> Path:
    """Save a tiny random ``StableDiffusionInstructPix2PixPipeline`` to ``out``."""
    import torch
    from diffusers import (AutoencoderKL, DDPMScheduler, StableDiffusionInstructPix2PixPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel

    from editlens.testing.tiny_diffusers import clip_style_tokenizer

    out = Path(out)
    tok = clip_style_tokenizer()
    torch.manual_seed(seed)
    # 8 input channels: 4 noisy latents + 4 latents of the source image
    unet = UNet2DConditionModel(sample_size=image_size // 2, in_channels=8, out_channels=4, layers_per_block=1,
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
    scheduler = DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              steps_offset=1)
    pipe = StableDiffusionInstructPix2PixPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tok, unet=unet,
                                                  scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                                  requires_safety_checker=False)
    pipe.save_pretrained(out)
    return out
