"""UNets: SD 1.x, SDXL and Kolors (UNet2DConditionModel), Stable Cascade's stage C."""

from __future__ import annotations

from .common import TINY_IMAGE, randn, timestep
from .family import Family, Preset
from .geometry import FamilyShape


def unet_inputs(config, shape, device, dtype, g):
    import torch

    b = shape.batch
    text_dim = config.encoder_hid_dim or config.cross_attention_dim
    kwargs = {
        "sample": randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timestep": timestep(b, device, 1000.0, g),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, text_dim),
    }
    if config.addition_embed_type == "text_time":
        pooled = config.projection_class_embeddings_input_dim - 6 * config.addition_time_embed_dim
        kwargs["added_cond_kwargs"] = {
            "text_embeds": randn(g, device, dtype, b, pooled),
            "time_ids": torch.tensor(
                [[shape.height, shape.width, 0, 0, shape.height, shape.width]] * b, device=device, dtype=dtype
            ),
        }
    return kwargs


def unet_block_lists(model) -> dict:
    """Every resnet and transformer list of the down, mid and up blocks; they interleave inside a
    UNet block, so each module is its own region (no interval or stride grouping)."""
    lists = {}
    stages = (
        [(f"down_blocks.{i}", b) for i, b in enumerate(model.down_blocks)]
        + [("mid_block", model.mid_block)]
        + [(f"up_blocks.{i}", b) for i, b in enumerate(model.up_blocks)]
    )
    for prefix, stage in stages:
        for kind in ("resnets", "attentions"):
            if len(getattr(stage, kind, ())):
                lists[f"{prefix}.{kind}"] = None
    return lists


def stable_cascade_inputs(config, shape, device, dtype, g):
    b = shape.batch
    side = max(shape.height // 42, 8)  # stage C latents: 1024 px -> 24 x 24
    return {
        "sample": randn(g, device, dtype, b, config.in_channels, side, side),
        "timestep_ratio": timestep(b, device, 1.0, g).to(dtype),
        "clip_text_pooled": randn(g, device, dtype, b, 1, config.clip_text_pooled_in_channels),
        "clip_text": randn(g, device, dtype, b, shape.text_tokens, config.clip_text_in_channels),
        "clip_img": randn(g, device, dtype, b, 1, config.clip_image_in_channels),
    }


def stable_cascade_block_lists(model) -> dict:
    """Stage C's down/up blocks are flat lists of Res/Timestep/Attention micro-blocks, each called
    with different extra arguments (and repeated by the repeat mappers): per micro-block regions."""
    return {
        **{f"down_blocks.{i}": None for i in range(len(model.down_blocks))},
        **{f"up_blocks.{i}": None for i in range(len(model.up_blocks))},
    }


UNET_ATTENTION = ("transformer_blocks.*.attn1", "transformer_blocks.*.attn2")
UNET_FFN = ("transformer_blocks.*.ff",)
UNET_NOTE = (
    "a block is one UNet module: each ResnetBlock2D and each Transformer2DModel of the down, mid and "
    "up blocks is its own checkpointed region; they interleave, so interval and stride do not apply"
)
TINY_UNET = {
    "sample_size": 8,
    "block_out_channels": (32, 64),
    "layers_per_block": 1,
    "norm_num_groups": 8,
    "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": 32,
    "attention_head_dim": 8,
}
SDXL = {
    "sample_size": 128,
    "block_out_channels": (320, 640, 1280),
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    "transformer_layers_per_block": (1, 2, 10),
    "attention_head_dim": (5, 10, 20),
    "cross_attention_dim": 2048,
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816,
}
TINY_SDXL = {
    **TINY_UNET,
    "transformer_layers_per_block": (2, 1),
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 8,
    "projection_class_embeddings_input_dim": 64,
}

FAMILIES = (
    Family(
        name="sd1x",
        docs_name="SD 1.x",
        cls="UNet2DConditionModel",
        presets={
            "sd15": Preset(
                {"sample_size": 64, "cross_attention_dim": 768}, FamilyShape(512, 512, text_tokens=77), 0.86
            ),
            "tiny": Preset(TINY_UNET, TINY_IMAGE),
        },
        inputs=unet_inputs,
        latents_arg="sample",
        block_lists=unet_block_lists,
        attention=UNET_ATTENTION,
        feed_forward=UNET_FFN,
        blocks_note=UNET_NOTE,
    ),
    Family(
        name="sdxl",
        docs_name="SDXL",
        cls="UNet2DConditionModel",
        presets={
            "sdxl": Preset(SDXL, FamilyShape(1024, 1024, text_tokens=77), 2.57),
            "tiny": Preset(TINY_SDXL, TINY_IMAGE),
        },
        inputs=unet_inputs,
        latents_arg="sample",
        block_lists=unet_block_lists,
        attention=UNET_ATTENTION,
        feed_forward=UNET_FFN,
        blocks_note=UNET_NOTE,
    ),
    Family(
        name="kolors",
        docs_name="Kolors",
        cls="UNet2DConditionModel",
        presets={
            "kolors": Preset(
                {
                    **SDXL,
                    "projection_class_embeddings_input_dim": 5632,
                    "encoder_hid_dim": 4096,
                    "encoder_hid_dim_type": "text_proj",
                },
                FamilyShape(1024, 1024, text_tokens=256),
                2.58,
            ),
            "tiny": Preset(
                {
                    **TINY_SDXL,
                    "projection_class_embeddings_input_dim": 72,
                    "encoder_hid_dim": 24,
                    "encoder_hid_dim_type": "text_proj",
                },
                TINY_IMAGE,
            ),
        },
        inputs=unet_inputs,
        latents_arg="sample",
        block_lists=unet_block_lists,
        attention=UNET_ATTENTION,
        feed_forward=UNET_FFN,
        blocks_note=UNET_NOTE,
    ),
    Family(
        name="stable-cascade",
        docs_name="Stable Cascade",
        cls="StableCascadeUNet",
        presets={
            "stage-c": Preset(
                {"clip_text_in_channels": 1280, "clip_image_in_channels": 768, "switch_level": [False]},
                FamilyShape(1024, 1024, text_tokens=77),
                3.59,
            ),
            "tiny": Preset(
                {
                    "in_channels": 4,
                    "out_channels": 4,
                    "timestep_ratio_embedding_dim": 16,
                    "patch_size": 1,
                    "conditioning_dim": 32,
                    "block_out_channels": (32, 32),
                    "num_attention_heads": (2, 2),
                    "down_num_layers_per_block": (1, 1),
                    "up_num_layers_per_block": (1, 1),
                    "down_blocks_repeat_mappers": (1, 1),
                    "up_blocks_repeat_mappers": (1, 1),
                    "clip_text_in_channels": 16,
                    "clip_text_pooled_in_channels": 16,
                    "clip_image_in_channels": 16,
                    "clip_seq": 2,
                    "effnet_in_channels": None,
                    "pixel_mapper_in_channels": None,
                    "switch_level": [False],
                },
                FamilyShape(336, 336, batch=2, text_tokens=8),
            ),
        },
        inputs=stable_cascade_inputs,
        latents_arg="sample",
        block_lists=stable_cascade_block_lists,
        attention=("attention",),
        reasons={"feed_forward": "stage C's micro-blocks have no attention / feed-forward split"},
        blocks_note="a block is one Res/Timestep/Attention micro-block of stage C's down and up blocks",
    ),
)
