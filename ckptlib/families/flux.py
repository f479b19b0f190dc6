"""Flux-like double- and single-stream transformers (Flux.1/.2/.3, Chroma, Krea 2, LongCat Image, HiDream)."""

from __future__ import annotations

from ..spec import FIRST_ARG
from .common import ENCODER_HIDDEN, HIDDEN, IMAGE_1024, PACKED, TINY_IMAGE, grid_ids, randn, timestep
from .family import Family, Preset
from .ffn_sides import CHROMA_SIDES, FLUX_SIDES, KREA2_SIDES
from .geometry import FamilyShape, Latents


def flux_inputs(config, shape, device, dtype, g, guidance=None, pooled=True):
    import torch

    h, w = shape.height // 16, shape.width // 16  # VAE /8, packed 2x2
    b = shape.batch
    ids = torch.zeros(h, w, 3, device=device)
    ids[..., 1] = torch.arange(h, device=device)[:, None]
    ids[..., 2] = torch.arange(w, device=device)[None, :]
    kwargs = {
        "hidden_states": randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "img_ids": ids.reshape(h * w, 3).to(dtype),
        "txt_ids": torch.zeros(shape.text_tokens, 3, device=device, dtype=dtype),
    }
    if pooled:
        kwargs["pooled_projections"] = randn(g, device, dtype, b, config.pooled_projection_dim)
    if getattr(config, "guidance_embeds", False):
        kwargs["guidance"] = torch.full((b,), 3.5, device=device, dtype=dtype)
    return kwargs


def chroma_inputs(config, shape, device, dtype, g):
    return flux_inputs(config, shape, device, dtype, g, pooled=False)


def flux2_inputs(config, shape, device, dtype, g):
    import torch

    h, w, b = shape.height // 16, shape.width // 16, shape.batch
    img_ids = torch.zeros(h, w, 4, device=device)
    img_ids[..., 1] = torch.arange(h, device=device)[:, None]
    img_ids[..., 2] = torch.arange(w, device=device)[None, :]
    txt_ids = torch.zeros(shape.text_tokens, 4, device=device)
    txt_ids[:, 3] = torch.arange(shape.text_tokens, device=device)
    kwargs = {
        "hidden_states": randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "img_ids": img_ids.reshape(1, h * w, 4).expand(b, -1, -1),
        "txt_ids": txt_ids.reshape(1, -1, 4).expand(b, -1, -1),
    }
    if config.guidance_embeds:
        kwargs["guidance"] = torch.full((b,), 4.0, device=device, dtype=dtype)
    return kwargs


def flux3_inputs(config, shape, device, dtype, g):
    import torch

    h, w, b = shape.height // 16, shape.width // 16, shape.batch
    txt_ids = torch.zeros(shape.text_tokens, 4, device=device)
    txt_ids[:, 3] = torch.arange(shape.text_tokens, device=device)
    return {
        "hidden_states": randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "img_ids": grid_ids(h, w, 4, device).to(dtype),
        "txt_ids": txt_ids.to(dtype),
    }


def krea2_inputs(config, shape, device, dtype, g):
    import torch

    h, w, b, t = shape.height // 16, shape.width // 16, shape.batch, shape.text_tokens
    text_ids = torch.zeros(t, 3, device=device)
    text_ids[:, 0] = torch.arange(t, device=device)
    return {
        "hidden_states": randn(g, device, dtype, b, h * w, config.in_channels),
        # hidden states of several text-encoder layers, fused by the model
        "encoder_hidden_states": randn(g, device, dtype, b, t, config.num_text_layers, config.text_hidden_dim),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "position_ids": torch.cat([text_ids, grid_ids(h, w, 3, device)]).long(),
        "encoder_attention_mask": torch.ones(b, t, device=device, dtype=torch.bool),
    }


def hidream_inputs(config, shape, device, dtype, g):
    b, t = shape.batch, shape.text_tokens
    llama_layers = max(config.llama_layers) + 1
    return {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timesteps": timestep(b, device, 1000.0, g),
        "encoder_hidden_states_t5": randn(g, device, dtype, b, t, config.caption_channels[0]),
        "encoder_hidden_states_llama3": randn(g, device, dtype, llama_layers, b, t, config.caption_channels[1]),
        "pooled_embeds": randn(g, device, dtype, b, config.text_emb_dim),
    }


def longcat_inputs(config, shape, device, dtype, g):
    kwargs = flux_inputs(config, shape, device, dtype, g, pooled=False)
    kwargs["img_ids"][:, 0] = 1.0  # image tokens sit after the text tokens on the first axis
    return kwargs


FAMILIES = (
    Family(
        name="flux1",
        docs_name="Flux.1",
        cls="FluxTransformer2DModel",
        presets={
            "dev": Preset({"guidance_embeds": True}, IMAGE_1024, 11.90),
            "schnell": Preset({"guidance_embeds": False}, IMAGE_1024, 11.89),
            "tiny": Preset(
                {
                    "num_layers": 2,
                    "num_single_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "joint_attention_dim": 32,
                    "pooled_projection_dim": 16,
                    "in_channels": 16,
                    "axes_dims_rope": (4, 6, 6),
                    "guidance_embeds": True,
                },
                TINY_IMAGE,
            ),
        },
        inputs=flux_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": ENCODER_HIDDEN},
        attention=("attn",),
        feed_forward=("ff", "ff_context"),
        ffn_sides=FLUX_SIDES,
        blocks_note="double blocks: attn, ff, ff_context; single blocks fuse the MLP into the attention path: "
        "torch-ffn / unsloth-ffn recompute the double blocks' norm2, modulation, MLP, gate and residual and the "
        "single blocks' MLP path, as SimpleTuner does (mode.ffn_scope=modules: the double blocks' ff modules only)",
    ),
    Family(
        name="flux2",
        docs_name="Flux.2",
        cls="Flux2Transformer2DModel",
        presets={
            "dev": Preset({}, IMAGE_1024, 32.22),
            "klein-4b": Preset(
                {
                    "num_layers": 5,
                    "num_single_layers": 20,
                    "num_attention_heads": 24,
                    "joint_attention_dim": 7680,
                    "guidance_embeds": False,
                },
                FamilyShape(512, 512, text_tokens=512),
                3.88,
            ),
            "klein-9b": Preset(
                {
                    "num_layers": 8,
                    "num_single_layers": 24,
                    "num_attention_heads": 32,
                    "joint_attention_dim": 12288,
                    "guidance_embeds": False,
                },
                FamilyShape(512, 512, text_tokens=512),
                9.08,
            ),
            "tiny": Preset(
                {
                    "num_layers": 2,
                    "num_single_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "joint_attention_dim": 32,
                    "in_channels": 16,
                    "axes_dims_rope": (4, 4, 4, 4),
                    "timestep_guidance_channels": 16,
                },
                TINY_IMAGE,
            ),
        },
        inputs=flux2_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": HIDDEN},
        attention=("attn",),
        feed_forward=("ff", "ff_context"),
        lora_targets=("to_q", "to_k", "to_v", "to_out.0", "to_qkv_mlp_proj"),
        blocks_note="single blocks fuse attention and MLP (to_qkv_mlp_proj): FFN modes cover the double blocks",
    ),
    Family(
        name="flux3-klein",
        docs_name="Flux.3 Image Klein",
        cls="Flux3Transformer2DModel",
        presets={
            "klein-base": Preset({}, FamilyShape(512, 512, text_tokens=80)),
            "tiny": Preset(
                {
                    "in_channels": 16,
                    "cond_in_channels": 16,
                    "num_layers": 2,
                    "num_single_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "joint_attention_dim": 32,
                    "timestep_channels": 16,
                    "axes_dims_rope": (4, 4, 4, 4),
                },
                TINY_IMAGE,
            ),
        },
        inputs=flux3_inputs,
        latents=PACKED,
        block_lists={
            "txt_mode_blocks": FIRST_ARG,
            "mode_blocks.image": FIRST_ARG,
            "single_transformer_blocks": ENCODER_HIDDEN,
        },
        attention=("attn",),
        feed_forward=("ff",),
        blocks_note="text, image and joint stream blocks are segmented separately, as in the docs",
    ),
    Family(
        name="chroma",
        docs_name="Chroma",
        cls="ChromaTransformer2DModel",
        presets={
            "chroma": Preset({}, IMAGE_1024, 8.90),
            "tiny": Preset(
                {
                    "num_layers": 2,
                    "num_single_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "joint_attention_dim": 32,
                    "in_channels": 16,
                    "axes_dims_rope": (4, 6, 6),
                    "approximator_num_channels": 8,
                    "approximator_hidden_dim": 32,
                    "approximator_layers": 1,
                },
                TINY_IMAGE,
            ),
        },
        inputs=chroma_inputs,
        latents=PACKED,
        # The loops slice per-block modulation by index: a grouped region would feed block i's slice
        # to block i+1, so only per-block regions are offered.
        block_lists={"transformer_blocks": None, "single_transformer_blocks": None},
        attention=("attn",),
        feed_forward=("ff", "ff_context"),
        ffn_sides=CHROMA_SIDES,
    ),
    Family(
        name="krea2",
        docs_name="Krea 2",
        cls="Krea2Transformer2DModel",
        presets={
            "raw": Preset({}, FamilyShape(512, 512, text_tokens=128)),
            "tiny": Preset(
                {
                    "in_channels": 16,
                    "num_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 1,
                    "intermediate_size": 48,
                    "timestep_embed_dim": 16,
                    "text_hidden_dim": 24,
                    "num_text_layers": 2,
                    "text_num_attention_heads": 2,
                    "text_num_key_value_heads": 2,
                    "text_intermediate_size": 32,
                    "num_layerwise_text_blocks": 1,
                    "num_refiner_text_blocks": 1,
                    "axes_dims_rope": (4, 6, 6),
                },
                TINY_IMAGE,
            ),
        },
        inputs=krea2_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": FIRST_ARG},
        attention=("attn",),
        feed_forward=("ff",),
        ffn_sides=KREA2_SIDES,
        blocks_note="the joint transformer blocks; the text-fusion stack is not checkpointed",
    ),
    Family(
        name="hidream",
        docs_name="HiDream",
        cls="HiDreamImageTransformer2DModel",
        presets={
            "i1-full": Preset(
                {
                    "patch_size": 2,
                    "in_channels": 16,
                    "out_channels": 16,
                    "axes_dims_rope": (64, 32, 32),
                    "caption_channels": [4096, 4096],
                    "llama_layers": list(range(32)) + [31] * 16,
                    "force_inference_output": False,
                },
                FamilyShape(512, 512, text_tokens=128),
                17.11,
            ),
            "tiny": Preset(
                {
                    "patch_size": 2,
                    "in_channels": 4,
                    "out_channels": 4,
                    "num_layers": 2,
                    "num_single_layers": 2,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "caption_channels": [24, 24],
                    "text_emb_dim": 16,
                    "num_routed_experts": 2,
                    "num_activated_experts": 1,
                    "axes_dims_rope": (4, 6, 6),
                    "max_resolution": (64, 64),
                    "llama_layers": [0, 1, 1, 1],
                    "force_inference_output": False,
                },
                TINY_IMAGE,
            ),
        },
        inputs=hidream_inputs,
        latents=Latents(patch="patch_size"),
        # Each block gets its own Llama layer's states from the loop: per-block regions only.
        block_lists={"double_stream_blocks": None, "single_stream_blocks": None},
        attention=("block.attn1",),
        feed_forward=("block.ff_i", "block.ff_t"),
        lora_targets=("to_q", "to_k", "to_v", "to_out"),
        blocks_note="blocks are HiDreamBlock wrappers; the image feed-forward is a mixture of experts (trained "
        "in train mode, force_inference_output=False); image tokens are padded to max_resolution's count",
        routed_experts="num_routed_experts",  # each expert's tokens are x[flat_topk_idx == i]
    ),
    Family(
        name="longcat-image",
        docs_name="LongCat Image",
        cls="LongCatImageTransformer2DModel",
        presets={
            "default": Preset({}, FamilyShape(512, 512, text_tokens=512)),
            "tiny": Preset(
                {
                    "in_channels": 16,
                    "num_layers": 2,
                    "num_single_layers": 4,
                    "attention_head_dim": 16,
                    "num_attention_heads": 2,
                    "joint_attention_dim": 32,
                    "pooled_projection_dim": 32,
                    "axes_dims_rope": [4, 6, 6],
                },
                TINY_IMAGE,
            ),
        },
        inputs=longcat_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": ENCODER_HIDDEN},
        attention=("attn",),
        feed_forward=("ff", "ff_context"),
        blocks_note="single blocks fuse the MLP into the attention path: FFN modes cover the double blocks",
    ),
)
