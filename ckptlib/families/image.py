"""Other image transformers: MMDiT (SD3, AuraFlow), PixArt, Sana (and SanaVideo, which shares its
inputs), Lumina2, Z-Image, Qwen Image, OmniGen, ERNIE, Ideogram."""

from __future__ import annotations

from ..spec import FIRST_ARG
from .common import ENCODER_HIDDEN, HIDDEN, PACKED, TINY_IMAGE, grid_ids, patched, randn, timestep
from .family import Family, Preset
from .ffn_sides import Z_IMAGE_SIDES
from .geometry import FamilyShape, Latents


def sd3_inputs(config, shape, device, dtype, g, pooled=True):
    """MMDiT latents (B, C, H/8, W/8), text states, the pooled text vector where the model takes one."""
    b = shape.batch
    kwargs = {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
    }
    if pooled:
        kwargs["pooled_projections"] = randn(g, device, dtype, b, config.pooled_projection_dim)
    return {**kwargs, "timestep": timestep(b, device, 1000.0, g)}


def pixart_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": timestep(b, device, 1000.0, g),
        "added_cond_kwargs": {"resolution": None, "aspect_ratio": None},
    }


def sana_inputs(config, shape, device, dtype, g):
    b = shape.batch
    frames = {} if shape.frames is None else {"t": (shape.frames - 1) // 4 + 1}
    spatial = (shape.height // 32, shape.width // 32)  # DC-AE /32
    latents = (b, config.in_channels, *frames.values(), *spatial)
    return {
        "hidden_states": randn(g, device, dtype, *latents),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": timestep(b, device, 1000.0, g),
    }


def auraflow_inputs(config, shape, device, dtype, g):
    return sd3_inputs(config, shape, device, dtype, g, pooled=False)


def lumina2_inputs(config, shape, device, dtype, g):
    import torch

    b = shape.batch
    return {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timestep": 1.0 - timestep(b, device, 1.0, g),  # Lumina2 counts time the other way
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.cap_feat_dim),
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.bool),
    }


def qwen_image_inputs(config, shape, device, dtype, g):
    import torch

    h, w, b = shape.height // 16, shape.width // 16, shape.batch
    return {
        "hidden_states": randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "encoder_hidden_states_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.long),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "img_shapes": [[(1, h, w)]] * b,
    }


def qwen_image21_inputs(config, shape, device, dtype, g):
    """Text slots then one slot per 2x2 group of packed target latents (`img_mask` marks image slots)."""
    import torch

    h, w, b, t = shape.height // 16, shape.width // 16, shape.batch, shape.text_tokens
    slots = torch.cat([torch.zeros(b, t, dtype=torch.bool), torch.ones(b, h * w // 4, dtype=torch.bool)], dim=1)
    return {
        "hidden_states": randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": randn(g, device, dtype, b, t, config.context_in_dim),
        "encoder_hidden_states_mask": torch.ones(b, t, device=device, dtype=torch.bool),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "img_shapes": [[(1, h, w)]] * b,
        "img_mask": slots.to(device),
    }


def omnigen_inputs(config, shape, device, dtype, g):
    """Token-id prompt, then the time token, then the noisy image tokens (no input images)."""
    import torch

    b, t = shape.batch, shape.text_tokens
    image_tokens = (shape.height // 8 // config.patch_size) * (shape.width // 8 // config.patch_size)
    length = t + 1 + image_tokens
    return {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "input_ids": torch.randint(0, config.vocab_size, (b, t), generator=g, device=device),
        "input_img_latents": [],
        "input_image_sizes": {},
        "attention_mask": torch.ones(b, length, length, device=device, dtype=dtype),
        "position_ids": torch.arange(length, device=device)[None].expand(b, -1),
    }


def z_image_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "x": [randn(g, device, dtype, config.in_channels, 1, shape.height // 8, shape.width // 8) for _ in range(b)],
        "t": 1.0 - timestep(b, device, 1.0, g),
        "cap_feats": [randn(g, device, dtype, shape.text_tokens, config.cap_feat_dim) for _ in range(b)],
    }


def ernie_inputs(config, shape, device, dtype, g):
    import torch

    b = shape.batch
    return {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, shape.height // 16, shape.width // 16),
        "timestep": timestep(b, device, 1000.0, g),
        "text_bth": randn(g, device, dtype, b, shape.text_tokens, config.text_in_dim),
        "text_lens": torch.full((b,), shape.text_tokens, device=device, dtype=torch.long),
    }


def ideogram4_inputs(config, shape, device, dtype, g):
    """One packed sequence per sample: text (LLM) tokens, then the image tokens to denoise."""
    import torch

    h, w, b, t = shape.height // 16, shape.width // 16, shape.batch, shape.text_tokens
    length = t + h * w
    positions = torch.cat([torch.arange(t, device=device)[:, None].expand(t, 3), grid_ids(h, w, 3, device).long() + t])
    indicator = torch.cat([torch.full((t,), 3, device=device), torch.full((h * w,), 2, device=device)])  # LLM, image
    return {
        "hidden_states": randn(g, device, dtype, b, length, config.in_channels),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "encoder_hidden_states": randn(g, device, dtype, b, length, config.llm_features_dim),
        "position_ids": positions.long()[None].expand(b, -1, -1),
        "segment_ids": torch.zeros(b, length, device=device, dtype=torch.long),
        "indicator": indicator.long()[None].expand(b, -1),
    }


LINEAR_ATTENTION = {"attention": "linear attention keeps no score tensors, so there is no attention offload"}

FAMILIES = (
    Family(
        name="sd3",
        docs_name="SD3",
        cls="SD3Transformer2DModel",
        presets={
            # SimpleTuner's sd3 default flavour (helpers/models/sd3/model.py) and its sd3.peft-lora example:
            # MMDiT-X (a second image-only attention in the first 13 blocks), QK RMSNorm, 77 CLIP + 154 T5 tokens
            "sd3.5-medium": Preset(
                {
                    "num_layers": 24,
                    "num_attention_heads": 24,
                    "caption_projection_dim": 1536,
                    "pos_embed_max_size": 384,
                    "qk_norm": "rms_norm",
                    "dual_attention_layers": tuple(range(13)),
                },
                FamilyShape(1024, 1024, text_tokens=231),
                2.24,
            ),
            "sd3-medium": Preset(
                {
                    "num_layers": 24,
                    "num_attention_heads": 24,
                    "caption_projection_dim": 1536,
                    "pos_embed_max_size": 192,
                },
                FamilyShape(1024, 1024, text_tokens=333),
                2.03,
            ),
            "sd3.5-large": Preset(
                {
                    "num_layers": 38,
                    "num_attention_heads": 38,
                    "caption_projection_dim": 2432,
                    "pos_embed_max_size": 192,
                    "qk_norm": "rms_norm",
                },
                FamilyShape(1024, 1024, text_tokens=333),
                8.06,
            ),
            "tiny": Preset(
                {
                    "sample_size": 8,
                    "num_layers": 4,
                    "attention_head_dim": 8,
                    "num_attention_heads": 4,
                    "joint_attention_dim": 32,
                    "caption_projection_dim": 32,
                    "pooled_projection_dim": 16,
                    "in_channels": 4,
                    "out_channels": 4,
                    "pos_embed_max_size": 16,
                },
                TINY_IMAGE,
            ),
        },
        inputs=sd3_inputs,
        latents=patched(2),
        block_lists={"transformer_blocks": ENCODER_HIDDEN},
        attention=("attn", "attn2"),
        feed_forward=("ff", "ff_context"),
    ),
    Family(
        name="pixart",
        docs_name="PixArt",
        cls="PixArtTransformer2DModel",
        presets={
            # SimpleTuner's pixart default flavour (helpers/models/pixart/model.py): terminusresearch's
            # 900M, the 600M Sigma's width at 42 blocks
            "900m-1024": Preset(
                {
                    "num_layers": 42,
                    "caption_channels": 4096,
                    "interpolation_scale": 2,
                    "use_additional_conditions": False,
                    "sample_size": 128,
                },
                FamilyShape(1024, 1024, text_tokens=300),
                0.91,
            ),
            "sigma-1024": Preset(
                {
                    "caption_channels": 4096,
                    "interpolation_scale": 2,
                    "use_additional_conditions": False,
                    "sample_size": 128,
                },
                FamilyShape(1024, 1024, text_tokens=300),
                0.61,
            ),
            "tiny": Preset(
                {
                    "num_attention_heads": 2,
                    "attention_head_dim": 16,
                    "in_channels": 4,
                    "out_channels": 8,
                    "num_layers": 4,
                    "cross_attention_dim": 32,
                    "caption_channels": 24,
                    "sample_size": 8,
                    "norm_num_groups": 4,
                    "use_additional_conditions": False,
                },
                TINY_IMAGE,
            ),
        },
        inputs=pixart_inputs,
        latents=patched(2),
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn1", "attn2"),
        feed_forward=("ff",),
    ),
    Family(
        name="sana",
        docs_name="Sana",
        cls="SanaTransformer2DModel",
        presets={
            "1600m-1024": Preset({}, FamilyShape(1024, 1024, text_tokens=300), 1.60),
            "tiny": Preset(
                {
                    "in_channels": 4,
                    "out_channels": 4,
                    "num_attention_heads": 2,
                    "attention_head_dim": 8,
                    "num_layers": 4,
                    "num_cross_attention_heads": 2,
                    "cross_attention_head_dim": 8,
                    "cross_attention_dim": 16,
                    "caption_channels": 24,
                    "sample_size": 4,
                    "patch_size": 1,
                },
                FamilyShape(128, 128, batch=2, text_tokens=8),
            ),
        },
        inputs=sana_inputs,
        latents=patched(1, spatial=32),
        block_lists={"transformer_blocks": HIDDEN},
        feed_forward=("ff",),
        reasons=LINEAR_ATTENTION,
    ),
    Family(
        name="sana-video",
        docs_name="SanaVideo",
        cls="SanaVideoTransformer3DModel",
        presets={
            "2b-480p": Preset({"mlp_ratio": 3.0}, FamilyShape(480, 832, frames=49, text_tokens=300), 2.06),
            "tiny": Preset(
                {
                    "in_channels": 4,
                    "out_channels": 4,
                    "num_attention_heads": 2,
                    "attention_head_dim": 8,
                    "num_layers": 4,
                    "num_cross_attention_heads": 2,
                    "cross_attention_head_dim": 8,
                    "cross_attention_dim": 16,
                    "caption_channels": 24,
                    "sample_size": 4,
                    "patch_size": (1, 1, 1),
                },
                FamilyShape(128, 128, frames=5, batch=2, text_tokens=8),
            ),
        },
        inputs=sana_inputs,
        latents=patched((1, 2, 2), spatial=32),
        block_lists={"transformer_blocks": HIDDEN},
        feed_forward=("ff",),
        reasons=LINEAR_ATTENTION,
    ),
    Family(
        name="auraflow",
        docs_name="AuraFlow",
        cls="AuraFlowTransformer2DModel",
        presets={
            "v0.3": Preset({}, FamilyShape(1024, 1024, text_tokens=256), 6.83),
            "tiny": Preset(
                {
                    "sample_size": 8,
                    "num_mmdit_layers": 2,
                    "num_single_dit_layers": 4,
                    "attention_head_dim": 8,
                    "num_attention_heads": 2,
                    "joint_attention_dim": 32,
                    "caption_projection_dim": 16,
                    "in_channels": 4,
                    "out_channels": 4,
                    "pos_embed_max_size": 64,
                },
                TINY_IMAGE,
            ),
        },
        inputs=auraflow_inputs,
        latents=patched(2),
        block_lists={"joint_transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": HIDDEN},
        attention=("attn",),
        feed_forward=("ff", "ff_context"),
    ),
    Family(
        name="lumina2",
        docs_name="Lumina2",
        cls="Lumina2Transformer2DModel",
        presets={
            "lumina2": Preset({"cap_feat_dim": 2304}, FamilyShape(512, 512, text_tokens=256), 2.61),
            "tiny": Preset(
                {
                    "sample_size": 8,
                    "in_channels": 4,
                    "out_channels": 4,
                    "hidden_size": 32,
                    "num_layers": 4,
                    "num_refiner_layers": 1,
                    "num_attention_heads": 2,
                    "num_kv_heads": 2,
                    "multiple_of": 8,
                    "axes_dim_rope": (4, 6, 6),
                    "axes_lens": (64, 32, 32),
                    "cap_feat_dim": 24,
                },
                TINY_IMAGE,
            ),
        },
        inputs=lumina2_inputs,
        latents=patched(2),
        block_lists={"noise_refiner": FIRST_ARG, "context_refiner": FIRST_ARG, "layers": FIRST_ARG},
        attention=("attn",),
        feed_forward=("feed_forward",),
        blocks_note="the refiners (noise_refiner, context_refiner) are block lists of their own and are "
        "checkpointed too (diffusers' own hook covers `layers` only)",
        host_inputs=("encoder_attention_mask",),  # its rotary embedder reads the captions' lengths from it
    ),
    Family(
        name="qwen-image",
        docs_name="Qwen Image",
        cls="QwenImageTransformer2DModel",
        presets={
            "qwen-image": Preset({}, FamilyShape(1024, 1024, text_tokens=64), 20.43),
            "tiny": Preset(
                {
                    "num_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "joint_attention_dim": 32,
                    "in_channels": 16,
                    "out_channels": 4,
                    "axes_dims_rope": (4, 6, 6),
                },
                TINY_IMAGE,
            ),
        },
        inputs=qwen_image_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": ENCODER_HIDDEN},
        attention=("attn",),
        feed_forward=("img_mlp", "txt_mlp"),
    ),
    Family(
        name="qwen-image21",
        docs_name="Qwen Image 2.1",
        cls="QwenImage21Transformer2DModel",
        presets={
            "v2.1": Preset({}, FamilyShape(512, 512, text_tokens=10)),
            "tiny": Preset(
                {
                    "in_channels": 16,
                    "out_channels": 16,
                    "num_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "context_in_dim": 24,
                    "axes_dims_rope": (4, 6, 6),
                },
                TINY_IMAGE,
            ),
        },
        inputs=qwen_image21_inputs,
        # its layout mask repeats the joint sequence's slots and indexes the latents into them; a mask
        # made of the result selects its modulation rows
        host_inputs=("img_mask",),
        host_masks=True,
        latents=PACKED,
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn",),
        feed_forward=("img_mlp",),
        blocks_note="one joint text+image stream; grouped regions need the KV cache off (it is, in training)",
    ),
    Family(
        name="omnigen",
        docs_name="OmniGen",
        cls="OmniGenTransformer2DModel",
        presets={
            "v1": Preset(
                {"rope_scaling": {"type": "su", "short_factor": [1.0] * 48, "long_factor": [1.0] * 48}},
                FamilyShape(1024, 1024, text_tokens=64),
                3.76,
            ),
            "tiny": Preset(
                {
                    "hidden_size": 32,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 2,
                    "intermediate_size": 48,
                    "num_layers": 4,
                    "vocab_size": 128,
                    "pad_token_id": 0,
                    "in_channels": 4,
                    "pos_embed_max_size": 16,
                    "max_position_embeddings": 512,
                    "original_max_position_embeddings": 256,
                    "time_step_dim": 16,
                    "rope_scaling": {"type": "su", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8},
                },
                TINY_IMAGE,
            ),
        },
        inputs=omnigen_inputs,
        latents=patched(2),
        block_lists={"layers": FIRST_ARG},
        attention=("self_attn",),
        feed_forward=("mlp",),
        host_inputs=("position_ids",),  # its rotary embedding compares the largest position with a limit
    ),
    Family(
        name="z-image",
        docs_name="Z-Image Turbo",
        cls="ZImageTransformer2DModel",
        presets={
            "turbo": Preset({"axes_lens": [1536, 512, 512]}, FamilyShape(1024, 1024, text_tokens=256), 6.15),
            "tiny": Preset(
                {
                    "in_channels": 4,
                    "dim": 32,
                    "n_layers": 4,
                    "n_refiner_layers": 1,
                    "n_heads": 2,
                    "n_kv_heads": 2,
                    "cap_feat_dim": 24,
                    "axes_dims": [4, 6, 6],
                    "axes_lens": [64, 32, 32],
                },
                TINY_IMAGE,
            ),
        },
        inputs=z_image_inputs,
        latents_arg="x",
        latents=Latents(patch=2),
        block_lists={"noise_refiner": FIRST_ARG, "context_refiner": FIRST_ARG, "layers": FIRST_ARG},
        attention=("attention",),
        feed_forward=("feed_forward",),
        ffn_sides=Z_IMAGE_SIDES,
        blocks_note="noise and context refiners are checkpointed as block lists of their own; the model pads "
        "image and caption tokens to multiples of 32",
    ),
    Family(
        name="ernie-image",
        docs_name="ERNIE 4.5 Image",
        cls="ErnieImageTransformer2DModel",
        presets={
            "base": Preset({}, FamilyShape(512, 512, text_tokens=128)),
            "tiny": Preset(
                {
                    "hidden_size": 32,
                    "num_attention_heads": 2,
                    "num_layers": 4,
                    "ffn_hidden_size": 48,
                    "in_channels": 16,
                    "out_channels": 16,
                    "text_in_dim": 24,
                    "rope_axes_dim": (4, 6, 6),
                },
                TINY_IMAGE,
            ),
        },
        inputs=ernie_inputs,
        latents=patched(1, spatial=16),
        block_lists={"layers": FIRST_ARG},
        attention=("self_attention",),
        feed_forward=("mlp",),
    ),
    Family(
        name="ideogram4",
        docs_name="Ideogram 4.0",
        cls="Ideogram4Transformer2DModel",
        presets={
            "fp8": Preset({}, FamilyShape(1024, 1024, text_tokens=128)),
            "tiny": Preset(
                {
                    "in_channels": 16,
                    "num_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "intermediate_size": 48,
                    "adaln_dim": 16,
                    "llm_features_dim": 24,
                    "mrope_section": (2, 2, 2),
                },
                TINY_IMAGE,
            ),
        },
        inputs=ideogram4_inputs,
        latents=PACKED,
        block_lists={"layers": FIRST_ARG},
        attention=("attention",),
        feed_forward=("feed_forward",),
    ),
)
