"""One entry per docs family: class, presets, inputs, blocks, LoRA targets.

Real presets are the published configs (../notes/families.md in the design notes) with the docs'
training shape; `tiny` presets keep the architecture's structure at a size that trains in well
under a second on a CPU.
"""
from __future__ import annotations

import torch

from ..apply import FIRST_ARG, CallConvention
from .registry import Family, FamilyShape, Preset, register

ENCODER_HIDDEN = CallConvention.state("encoder_hidden_states", "hidden_states")  # (encoder, hidden) = block(...)
HIDDEN = CallConvention.state("hidden_states")
FIRST_TWO_ARGS = CallConvention.leading(2)


def _randn(generator, device, dtype, *shape):
    return torch.randn(*shape, generator=generator, device=device, dtype=dtype)


def _timestep(batch, device, scale: float, generator):
    """Flow-matching times in the family's scale (1000 for most, 1 for t/1000 families)."""
    return torch.rand(batch, generator=generator, device=device) * scale


# ---- input makers: (config, shape, device, dtype, generator) -> forward kwargs ----------------------

def flux_inputs(config, shape, device, dtype, g, guidance=None, pooled=True):
    h, w = shape.height // 16, shape.width // 16  # VAE /8, packed 2x2
    b = shape.batch
    ids = torch.zeros(h, w, 3, device=device)
    ids[..., 1] = torch.arange(h, device=device)[:, None]
    ids[..., 2] = torch.arange(w, device=device)[None, :]
    kwargs = {
        "hidden_states": _randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "img_ids": ids.reshape(h * w, 3).to(dtype),
        "txt_ids": torch.zeros(shape.text_tokens, 3, device=device, dtype=dtype),
    }
    if pooled:
        kwargs["pooled_projections"] = _randn(g, device, dtype, b, config.pooled_projection_dim)
    if getattr(config, "guidance_embeds", False):
        kwargs["guidance"] = torch.full((b,), 3.5, device=device, dtype=dtype)
    return kwargs


def chroma_inputs(config, shape, device, dtype, g):
    return flux_inputs(config, shape, device, dtype, g, pooled=False)


def sd3_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "pooled_projections": _randn(g, device, dtype, b, config.pooled_projection_dim),
        "timestep": _timestep(b, device, 1000.0, g),
    }


def auraflow_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "timestep": _timestep(b, device, 1000.0, g),
    }


def pixart_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": _timestep(b, device, 1000.0, g),
        "added_cond_kwargs": {"resolution": None, "aspect_ratio": None},
    }


def sana_inputs(config, shape, device, dtype, g):
    b = shape.batch
    frames = {} if shape.frames is None else {"t": (shape.frames - 1) // 4 + 1}
    spatial = (shape.height // 32, shape.width // 32)  # DC-AE /32
    latents = (b, config.in_channels, *frames.values(), *spatial)
    return {
        "hidden_states": _randn(g, device, dtype, *latents),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": _timestep(b, device, 1000.0, g),
    }


def wan_inputs(config, shape, device, dtype, g):
    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, t, shape.height // 8, shape.width // 8),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.text_dim),
        "timestep": _timestep(b, device, 1000.0, g),
    }


def qwen_image_inputs(config, shape, device, dtype, g):
    h, w, b = shape.height // 16, shape.width // 16, shape.batch
    return {
        "hidden_states": _randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "encoder_hidden_states_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.long),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "img_shapes": [[(1, h, w)]] * b,
    }


def lumina2_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timestep": 1.0 - _timestep(b, device, 1.0, g),  # Lumina2 counts time the other way
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.cap_feat_dim),
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.bool),
    }


def hunyuan_video_inputs(config, shape, device, dtype, g):
    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    kwargs = {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, t, shape.height // 8, shape.width // 8),
        "timestep": _timestep(b, device, 1000.0, g),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.text_embed_dim),
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.bool),
        "pooled_projections": _randn(g, device, dtype, b, config.pooled_projection_dim),
    }
    if config.guidance_embeds:
        kwargs["guidance"] = torch.full((b,), 6000.0, device=device, dtype=dtype)
    return kwargs


def ltx_inputs(config, shape, device, dtype, g):
    b, t = shape.batch, ((shape.frames or 1) - 1) // 8 + 1
    h, w = shape.height // 32, shape.width // 32
    return {
        "hidden_states": _randn(g, device, dtype, b, t * h * w, config.in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": _timestep(b, device, 1000.0, g),
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.bool),
        "num_frames": t, "height": h, "width": w,
    }


def z_image_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "x": [_randn(g, device, dtype, config.in_channels, 1, shape.height // 8, shape.width // 8) for _ in range(b)],
        "t": 1.0 - _timestep(b, device, 1.0, g),
        "cap_feats": [_randn(g, device, dtype, shape.text_tokens, config.cap_feat_dim) for _ in range(b)],
    }


def cosmos_inputs(config, shape, device, dtype, g):
    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    h, w = shape.height // 8, shape.width // 8
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, t, h, w),  # the model adds the mask channel
        "timestep": _timestep(b, device, 1.0, g),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.text_embed_dim),
        "padding_mask": torch.zeros(1, 1, h, w, device=device, dtype=dtype),
    }


def cosmos_torchvision_shim() -> None:
    """Cosmos resizes its padding mask with torchvision; without torchvision, nearest interpolation
    from torch does the same for a mask."""
    from types import SimpleNamespace

    import torch.nn.functional as F
    from diffusers.models.transformers import transformer_cosmos

    if hasattr(transformer_cosmos, "transforms"):
        return

    def resize(mask, size, interpolation=None):
        return F.interpolate(mask, size=tuple(size), mode="nearest")

    transformer_cosmos.transforms = SimpleNamespace(
        functional=SimpleNamespace(resize=resize), InterpolationMode=SimpleNamespace(NEAREST="nearest"))


# ---- entries ------------------------------------------------------------------------------------------

IMAGE_1024 = FamilyShape(height=1024, width=1024, text_tokens=512)
TINY_IMAGE = FamilyShape(height=64, width=64, batch=2, text_tokens=8)

register(
    Family(
        name="flux1", docs_name="Flux.1", cls="FluxTransformer2DModel",
        presets={
            "dev": Preset({"guidance_embeds": True}, IMAGE_1024, 11.90),
            "schnell": Preset({"guidance_embeds": False}, IMAGE_1024, 11.89),
            "tiny": Preset({"num_layers": 2, "num_single_layers": 4, "attention_head_dim": 16, "num_attention_heads": 2,
                            "joint_attention_dim": 32, "pooled_projection_dim": 16, "in_channels": 16,
                            "axes_dims_rope": (4, 6, 6), "guidance_embeds": True}, TINY_IMAGE),
        },
        inputs=flux_inputs,
        block_lists={"transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": ENCODER_HIDDEN},
        attention=("attn",), feed_forward=("ff", "ff_context"),
        blocks_note="double blocks: attn, ff, ff_context; single blocks fuse the MLP into the attention path, "
                    "so torch-ffn / unsloth-ffn recompute the double blocks' feed-forwards only",
    ),
    Family(
        name="chroma", docs_name="Chroma", cls="ChromaTransformer2DModel",
        presets={
            "chroma": Preset({}, IMAGE_1024, 8.90),
            "tiny": Preset({"num_layers": 2, "num_single_layers": 4, "attention_head_dim": 16, "num_attention_heads": 2,
                            "joint_attention_dim": 32, "in_channels": 16, "axes_dims_rope": (4, 6, 6),
                            "approximator_num_channels": 8, "approximator_hidden_dim": 32, "approximator_layers": 1},
                           TINY_IMAGE),
        },
        inputs=chroma_inputs,
        # The loops slice per-block modulation by index: a grouped region would feed block i's slice
        # to block i+1, so only per-block regions are offered.
        block_lists={"transformer_blocks": None, "single_transformer_blocks": None},
        attention=("attn",), feed_forward=("ff", "ff_context"),
    ),
    Family(
        name="sd3", docs_name="SD3", cls="SD3Transformer2DModel",
        presets={
            "sd3-medium": Preset({"num_layers": 24, "num_attention_heads": 24, "caption_projection_dim": 1536,
                                  "pos_embed_max_size": 192}, FamilyShape(1024, 1024, text_tokens=333), 2.03),
            "sd3.5-large": Preset({"num_layers": 38, "num_attention_heads": 38, "caption_projection_dim": 2432,
                                   "pos_embed_max_size": 192, "qk_norm": "rms_norm"}, FamilyShape(1024, 1024, text_tokens=333), 8.06),
            "tiny": Preset({"sample_size": 8, "num_layers": 4, "attention_head_dim": 8, "num_attention_heads": 4,
                            "joint_attention_dim": 32, "caption_projection_dim": 32, "pooled_projection_dim": 16,
                            "in_channels": 4, "out_channels": 4, "pos_embed_max_size": 16}, TINY_IMAGE),
        },
        inputs=sd3_inputs,
        block_lists={"transformer_blocks": ENCODER_HIDDEN},
        attention=("attn", "attn2"), feed_forward=("ff", "ff_context"),
    ),
    Family(
        name="wan", docs_name="Wan 2.1", cls="WanTransformer3DModel",
        presets={
            "t2v-14b": Preset({}, FamilyShape(480, 832, frames=81, text_tokens=512), 14.29),
            "t2v-1.3b": Preset({"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30},
                               FamilyShape(480, 832, frames=81, text_tokens=512), 1.42),
            "tiny": Preset({"num_attention_heads": 2, "attention_head_dim": 12, "in_channels": 4, "out_channels": 4,
                            "text_dim": 32, "freq_dim": 32, "ffn_dim": 48, "num_layers": 4, "rope_max_seq_len": 32},
                           FamilyShape(32, 32, frames=5, batch=2, text_tokens=8)),
        },
        inputs=wan_inputs,
        block_lists={"blocks": FIRST_ARG},
        attention=("attn1", "attn2"), feed_forward=("ffn",),
    ),
    Family(
        name="pixart", docs_name="PixArt", cls="PixArtTransformer2DModel",
        presets={
            "sigma-1024": Preset({"caption_channels": 4096, "interpolation_scale": 2, "use_additional_conditions": False,
                                  "sample_size": 128}, FamilyShape(1024, 1024, text_tokens=300), 0.61),
            "tiny": Preset({"num_attention_heads": 2, "attention_head_dim": 16, "in_channels": 4, "out_channels": 8,
                            "num_layers": 4, "cross_attention_dim": 32, "caption_channels": 24, "sample_size": 8,
                            "norm_num_groups": 4, "use_additional_conditions": False}, TINY_IMAGE),
        },
        inputs=pixart_inputs,
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn1", "attn2"), feed_forward=("ff",),
    ),
    Family(
        name="qwen-image", docs_name="Qwen Image", cls="QwenImageTransformer2DModel",
        presets={
            "qwen-image": Preset({}, FamilyShape(1024, 1024, text_tokens=64), 20.43),
            "tiny": Preset({"num_layers": 4, "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 32,
                            "in_channels": 16, "out_channels": 4, "axes_dims_rope": (4, 6, 6)}, TINY_IMAGE),
        },
        inputs=qwen_image_inputs,
        block_lists={"transformer_blocks": ENCODER_HIDDEN},
        attention=("attn",), feed_forward=("img_mlp", "txt_mlp"),
    ),
)

LINEAR_ATTENTION = {"attention": "linear attention keeps no score tensors, so there is no attention offload"}
TINY_VIDEO = FamilyShape(height=32, width=32, frames=5, batch=2, text_tokens=8)
VIDEO_480P = FamilyShape(height=480, width=832, frames=81, text_tokens=512)

register(
    Family(
        name="auraflow", docs_name="AuraFlow", cls="AuraFlowTransformer2DModel",
        presets={
            "v0.3": Preset({}, FamilyShape(1024, 1024, text_tokens=256), 6.83),
            "tiny": Preset({"sample_size": 8, "num_mmdit_layers": 2, "num_single_dit_layers": 4, "attention_head_dim": 8,
                            "num_attention_heads": 2, "joint_attention_dim": 32, "caption_projection_dim": 16,
                            "in_channels": 4, "out_channels": 4, "pos_embed_max_size": 64}, TINY_IMAGE),
        },
        inputs=auraflow_inputs,
        block_lists={"joint_transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": HIDDEN},
        attention=("attn",), feed_forward=("ff", "ff_context"),
    ),
    Family(
        name="sana", docs_name="Sana", cls="SanaTransformer2DModel",
        presets={
            "1600m-1024": Preset({}, FamilyShape(1024, 1024, text_tokens=300), 1.60),
            "tiny": Preset({"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 8,
                            "num_layers": 4, "num_cross_attention_heads": 2, "cross_attention_head_dim": 8,
                            "cross_attention_dim": 16, "caption_channels": 24, "sample_size": 4, "patch_size": 1},
                           FamilyShape(128, 128, batch=2, text_tokens=8)),
        },
        inputs=sana_inputs,
        block_lists={"transformer_blocks": HIDDEN},
        feed_forward=("ff",), reasons=LINEAR_ATTENTION,
    ),
    Family(
        name="sana-video", docs_name="SanaVideo", cls="SanaVideoTransformer3DModel",
        presets={
            "2b-480p": Preset({"mlp_ratio": 3.0}, FamilyShape(480, 832, frames=49, text_tokens=300), 2.06),
            "tiny": Preset({"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 8,
                            "num_layers": 4, "num_cross_attention_heads": 2, "cross_attention_head_dim": 8,
                            "cross_attention_dim": 16, "caption_channels": 24, "sample_size": 4, "patch_size": (1, 1, 1)},
                           FamilyShape(128, 128, frames=5, batch=2, text_tokens=8)),
        },
        inputs=sana_inputs,
        block_lists={"transformer_blocks": HIDDEN},
        feed_forward=("ff",), reasons=LINEAR_ATTENTION,
    ),
    Family(
        name="lumina2", docs_name="Lumina2", cls="Lumina2Transformer2DModel",
        presets={
            "lumina2": Preset({"cap_feat_dim": 2304}, FamilyShape(512, 512, text_tokens=256), 2.61),
            "tiny": Preset({"sample_size": 8, "in_channels": 4, "out_channels": 4, "hidden_size": 32, "num_layers": 4,
                            "num_refiner_layers": 1, "num_attention_heads": 2, "num_kv_heads": 2, "multiple_of": 8,
                            "axes_dim_rope": (4, 6, 6), "axes_lens": (64, 32, 32), "cap_feat_dim": 24}, TINY_IMAGE),
        },
        inputs=lumina2_inputs,
        block_lists={"noise_refiner": FIRST_ARG, "context_refiner": FIRST_ARG, "layers": FIRST_ARG},
        attention=("attn",), feed_forward=("feed_forward",),
        blocks_note="the refiners (noise_refiner, context_refiner) are block lists of their own and are "
                    "checkpointed too (diffusers' own hook covers `layers` only)",
    ),
    Family(
        name="hunyuanvideo", docs_name="HunyuanVideo", cls="HunyuanVideoTransformer3DModel",
        presets={
            "t2v-720p": Preset({}, FamilyShape(480, 848, frames=49, batch=2, text_tokens=256), 12.82),
            "tiny": Preset({"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 8,
                            "num_layers": 2, "num_single_layers": 4, "num_refiner_layers": 1, "text_embed_dim": 32,
                            "pooled_projection_dim": 16, "rope_axes_dim": (2, 2, 4)}, TINY_VIDEO),
        },
        inputs=hunyuan_video_inputs,
        # The loop passes extra positional arguments that land in the blocks' *args: keep them positional.
        block_lists={"transformer_blocks": FIRST_TWO_ARGS, "single_transformer_blocks": FIRST_TWO_ARGS},
        attention=("attn",), feed_forward=("ff", "ff_context"),
        blocks_note="double and single stream blocks; the text token refiner is not checkpointed",
    ),
    Family(
        name="ltxvideo", docs_name="LTXVideo 0.9", cls="LTXVideoTransformer3DModel",
        presets={
            "2b": Preset({}, FamilyShape(512, 768, frames=49, text_tokens=128), 1.92),
            "tiny": Preset({"in_channels": 8, "out_channels": 8, "num_attention_heads": 2, "attention_head_dim": 8,
                            "cross_attention_dim": 16, "num_layers": 4, "caption_channels": 24},
                           FamilyShape(64, 64, frames=9, batch=2, text_tokens=8)),
        },
        inputs=ltx_inputs,
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn1", "attn2"), feed_forward=("ff",),
    ),
    Family(
        name="cosmos2", docs_name="Cosmos 2 Image", cls="CosmosTransformer3DModel",
        presets={
            "2b-t2i": Preset({"num_attention_heads": 16, "rope_scale": (1.0, 4.0, 4.0), "extra_pos_embed_type": None},
                             FamilyShape(512, 512, text_tokens=512), 1.96),
            "tiny": Preset({"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 24,
                            "num_layers": 4, "text_embed_dim": 32, "adaln_lora_dim": 8, "max_size": (8, 16, 16),
                            "patch_size": (1, 2, 2), "rope_scale": (1.0, 1.0, 1.0), "extra_pos_embed_type": None},
                           FamilyShape(64, 64, batch=2, text_tokens=8)),
        },
        inputs=cosmos_inputs, setup=cosmos_torchvision_shim,
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn1", "attn2"), feed_forward=("ff",),
    ),
    Family(
        name="z-image", docs_name="Z-Image Turbo", cls="ZImageTransformer2DModel",
        presets={
            "turbo": Preset({"axes_lens": [1536, 512, 512]}, FamilyShape(1024, 1024, text_tokens=256), 6.15),
            "tiny": Preset({"in_channels": 4, "dim": 32, "n_layers": 4, "n_refiner_layers": 1, "n_heads": 2,
                            "n_kv_heads": 2, "cap_feat_dim": 24, "axes_dims": [4, 6, 6], "axes_lens": [64, 32, 32]},
                           TINY_IMAGE),
        },
        inputs=z_image_inputs, latents_arg="x",
        block_lists={"noise_refiner": FIRST_ARG, "context_refiner": FIRST_ARG, "layers": FIRST_ARG},
        attention=("attention",), feed_forward=("feed_forward",),
        blocks_note="noise and context refiners are checkpointed as block lists of their own",
    ),
)

NO_CLASS = "no diffusers class for this architecture in the installed diffusers (the docs ran it through its trainer's own code)"
register(*(Family(name=name, docs_name=docs_name, cls=None, unsupported=NO_CLASS) for name, docs_name in [
    ("boogu-image", "Boogu Image"), ("heartmula", "HeartMula"), ("longcat-video", "LongCat Video"),
    ("mageflow", "MageFlow"), ("wan-s2v", "Wan S2V"), ("zlab-i1", "ZLab I1"),
]))
