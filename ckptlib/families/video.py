"""Video transformers: Wan and AnyFlow, HunyuanVideo, LTX-Video 0.9 and 2, Cosmos 2 and 3, Kandinsky 5, MiniMax H3."""

from __future__ import annotations

from ..spec import FIRST_ARG, CallConvention
from .common import FIRST_TWO_ARGS, HIDDEN, TINY_VIDEO, grid_ids, patched, randn, timestep
from .family import Family, Preset
from .geometry import FamilyShape, Latents

# LTX-Video's VAE: /32 in space, /8 in time; its transformer patches by 1 x 1 x 1
LTX_LATENTS = Latents(
    spatial=32, temporal=8, patch="patch_size", patch_t="patch_size_t", defaults={"patch_size": 1, "patch_size_t": 1}
)


def hunyuan_video_inputs(config, shape, device, dtype, g):
    import torch

    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    kwargs = {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, t, shape.height // 8, shape.width // 8),
        "timestep": timestep(b, device, 1000.0, g),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.text_embed_dim),
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.bool),
        "pooled_projections": randn(g, device, dtype, b, config.pooled_projection_dim),
    }
    if config.guidance_embeds:
        kwargs["guidance"] = torch.full((b,), 6000.0, device=device, dtype=dtype)
    return kwargs


def ltx_inputs(config, shape, device, dtype, g):
    import torch

    b, t = shape.batch, ((shape.frames or 1) - 1) // 8 + 1
    h, w = shape.height // 32, shape.width // 32
    return {
        "hidden_states": randn(g, device, dtype, b, t * h * w, config.in_channels),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": timestep(b, device, 1000.0, g),
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device, dtype=torch.bool),
        "num_frames": t,
        "height": h,
        "width": w,
    }


def ltx2_inputs(config, shape, device, dtype, g):
    """Packed video tokens plus an audio track of the clip's length; text states for both streams."""
    import torch

    b = shape.batch
    t = ((shape.frames or 1) - 1) // config.vae_scale_factors[0] + 1
    h, w = shape.height // config.vae_scale_factors[1], shape.width // config.vae_scale_factors[2]
    audio_frames = max(
        4,
        round(
            (shape.frames or 1) / 24 * config.audio_sampling_rate / config.audio_hop_length / config.audio_scale_factor
        ),
    )
    sigma = timestep(b, device, 1.0, g).to(dtype)
    return {
        "hidden_states": randn(g, device, dtype, b, t * h * w, config.in_channels),
        "audio_hidden_states": randn(g, device, dtype, b, audio_frames, config.audio_in_channels),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "audio_encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": sigma,
        "sigma": sigma,
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device),
        "audio_encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device),
        "num_frames": t,
        "height": h,
        "width": w,
        "fps": 24.0,
        "audio_num_frames": audio_frames,
    }


def wan_inputs(config, shape, device, dtype, g):
    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    return {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, t, shape.height // 8, shape.width // 8),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.text_dim),
        "timestep": timestep(b, device, 1000.0, g),
    }


def anyflow_inputs(config, shape, device, dtype, g):
    kwargs = wan_inputs(config, shape, device, dtype, g)
    latents = kwargs["hidden_states"].transpose(1, 2).contiguous()  # (B, frames, C, H, W)
    per_frame = kwargs["timestep"][:, None].expand(-1, latents.shape[1]).contiguous()  # one time per frame
    kwargs.update(hidden_states=latents, timestep=per_frame, r_timestep=per_frame * 0.5)  # r: the target time
    return kwargs


def cosmos_inputs(config, shape, device, dtype, g):
    import torch

    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    h, w = shape.height // 8, shape.width // 8
    return {
        "hidden_states": randn(g, device, dtype, b, config.in_channels, t, h, w),  # the model adds the mask channel
        "timestep": timestep(b, device, 1.0, g),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.text_embed_dim),
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
        functional=SimpleNamespace(resize=resize), InterpolationMode=SimpleNamespace(NEAREST="nearest")
    )


def cosmos3_inputs(config, shape, device, dtype, g):
    """One packed sample: prompt token ids (the understanding stream), then the noisy video latent's
    patches (the generation stream); every latent frame is noisy and in the loss."""
    import torch

    p, t = config.latent_patch_size, ((shape.frames or 1) - 1) // 4 + 1
    h, w = shape.height // 16, shape.width // 16  # latent pixels (the VAE downsamples 16x)
    n_text, n_vision = shape.text_tokens, t * (h // p) * (w // p)
    length = n_text + n_vision
    vision = torch.arange(n_text, length, device=device)
    return {
        "input_ids": torch.randint(0, config.vocab_size, (n_text,), generator=g, device=device),
        "text_indexes": torch.arange(n_text, device=device),
        "position_ids": torch.arange(length, device=device)[None].expand(3, -1),
        "und_len": n_text,
        "sequence_length": length,
        "vision_tokens": [randn(g, device, dtype, 1, config.latent_channel, t, h, w)],
        "vision_token_shapes": [(t, h // p, w // p)],
        "vision_sequence_indexes": vision,
        "vision_mse_loss_indexes": vision,
        # One time for every patch, kept a tensor: builds on meta (the memory guard, the predictor) too.
        "vision_timesteps": timestep(1, device, 1.0, g).to(dtype).expand(n_vision).contiguous(),
        "vision_noisy_frame_indexes": [torch.arange(t, device=device)],
    }


def kandinsky5_inputs(config, shape, device, dtype, g):
    """Channels-last video latents (B, frames, h, w, C), with the visual-conditioning channels when
    the model takes them; rope positions per axis; Qwen text states and a CLIP pooled vector."""
    import torch

    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    h, w = shape.height // 8, shape.width // 8
    channels = 2 * config.in_visual_dim + 1 if config.visual_cond else config.in_visual_dim
    patch = config.patch_size
    return {
        "hidden_states": randn(g, device, dtype, b, t, h, w, channels),
        "encoder_hidden_states": randn(g, device, dtype, b, shape.text_tokens, config.in_text_dim),
        "timestep": timestep(b, device, 1000.0, g).to(dtype),
        "pooled_projections": randn(g, device, dtype, b, config.in_text_dim2),
        "visual_rope_pos": [
            torch.arange(t // patch[0], device=device),
            torch.arange(h // patch[1], device=device),
            torch.arange(w // patch[2], device=device),
        ],
        "text_rope_pos": torch.arange(shape.text_tokens, device=device),
    }


def minimax_h3_inputs(config, shape, device, dtype, g):
    """One packed sample: text, video and audio tokens in one sequence, addressed by index tensors;
    one timestep, modality tags 0 (text), 1 (video), 2 (audio)."""
    import torch

    t = ((shape.frames or 1) - 1) // 4 + 1
    p_t, p_h, p_w = config.patch_size
    h, w = shape.height // 8 // p_h, shape.width // 8 // p_w  # tokens per frame after the patch embedding
    n_text, n_video, n_audio = shape.text_tokens, t // p_t * h * w, max(t * 4, 4)
    length = n_text + n_video + n_audio
    video_positions = grid_ids(h, w, 3, device).repeat(t // p_t, 1)
    video_positions[:, 0] = torch.arange(t // p_t, device=device).repeat_interleave(h * w)
    positions = torch.cat(
        [
            torch.arange(n_text, device=device)[:, None].expand(n_text, 3).float(),
            video_positions,
            torch.arange(n_audio, device=device)[:, None].expand(n_audio, 3).float(),
        ]
    )
    tags = torch.cat([torch.zeros(n_text), torch.ones(n_video), torch.full((n_audio,), 2.0)]).long().to(device)
    index = torch.arange(length, device=device)
    return {
        "hidden_states": randn(g, device, dtype, 1, n_video, config.in_channels * p_t * p_h * p_w),
        "audio_hidden_states": randn(g, device, dtype, 1, n_audio, config.audio_in_channels),
        "encoder_hidden_states": randn(g, device, dtype, 1, n_text, config.text_dim),
        "timestep": timestep(1, device, 1000.0, g),
        "timestep_indices": torch.zeros(length, device=device, dtype=torch.long),
        "token_tags": tags,
        "position_ids": positions.long(),
        "text_indices": index[:n_text],
        "video_indices": index[n_text : n_text + n_video],
        "audio_indices": index[n_text + n_video :],
    }


VIDEO_480P = FamilyShape(height=480, width=832, frames=81, text_tokens=512)  # Wan's 480p, 81 frames
TINY_WAN = {
    "num_attention_heads": 2,
    "attention_head_dim": 12,
    "in_channels": 4,
    "out_channels": 4,
    "text_dim": 32,
    "freq_dim": 32,
    "ffn_dim": 48,
    "num_layers": 4,
    "rope_max_seq_len": 32,
}  # Wan and AnyFlow

FAMILIES = (
    Family(
        name="hunyuanvideo",
        docs_name="HunyuanVideo",
        cls="HunyuanVideoTransformer3DModel",
        presets={
            "t2v-720p": Preset({}, FamilyShape(480, 848, frames=49, batch=2, text_tokens=256), 12.82),
            "tiny": Preset(
                {
                    "in_channels": 4,
                    "out_channels": 4,
                    "num_attention_heads": 2,
                    "attention_head_dim": 8,
                    "num_layers": 2,
                    "num_single_layers": 4,
                    "num_refiner_layers": 1,
                    "text_embed_dim": 32,
                    "pooled_projection_dim": 16,
                    "rope_axes_dim": (2, 2, 4),
                },
                TINY_VIDEO,
            ),
        },
        inputs=hunyuan_video_inputs,
        latents=Latents(patch="patch_size", patch_t="patch_size_t", defaults={"patch_size": 2, "patch_size_t": 1}),
        # The loop passes extra positional arguments that land in the blocks' *args: keep them positional.
        block_lists={"transformer_blocks": FIRST_TWO_ARGS, "single_transformer_blocks": FIRST_TWO_ARGS},
        attention=("attn",),
        feed_forward=("ff", "ff_context"),
        blocks_note="double and single stream blocks; the text token refiner is not checkpointed",
    ),
    Family(
        name="ltxvideo",
        docs_name="LTXVideo 0.9",
        cls="LTXVideoTransformer3DModel",
        presets={
            "2b": Preset({}, FamilyShape(512, 768, frames=49, text_tokens=128), 1.92),
            "tiny": Preset(
                {
                    "in_channels": 8,
                    "out_channels": 8,
                    "num_attention_heads": 2,
                    "attention_head_dim": 8,
                    "cross_attention_dim": 16,
                    "num_layers": 4,
                    "caption_channels": 24,
                },
                FamilyShape(64, 64, frames=9, batch=2, text_tokens=8),
            ),
        },
        inputs=ltx_inputs,
        latents=LTX_LATENTS,
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn1", "attn2"),
        feed_forward=("ff",),
    ),
    Family(
        name="ltxvideo2",
        docs_name="LTXVideo2",
        cls="LTX2VideoTransformer3DModel",
        presets={
            "2.3-dev": Preset({}, FamilyShape(704, 1280, frames=49, text_tokens=256), 18.88),
            "tiny": Preset(
                {
                    "in_channels": 8,
                    "out_channels": 8,
                    "num_attention_heads": 2,
                    "attention_head_dim": 8,
                    "cross_attention_dim": 16,
                    "audio_in_channels": 8,
                    "audio_out_channels": 8,
                    "audio_num_attention_heads": 2,
                    "audio_attention_head_dim": 8,
                    "audio_cross_attention_dim": 16,
                    "num_layers": 4,
                    "caption_channels": 24,
                },
                FamilyShape(64, 64, frames=9, batch=2, text_tokens=8),
            ),
        },
        inputs=ltx2_inputs,
        latents=LTX_LATENTS,
        # Training passes no spatio-temporal guidance blocks, so every block gets the same extras.
        block_lists={"transformer_blocks": CallConvention.state("hidden_states", "audio_hidden_states")},
        attention=("attn1", "attn2", "audio_attn1", "audio_attn2"),
        cross_attention=("audio_to_video_attn", "video_to_audio_attn"),
        feed_forward=("ff", "audio_ff"),
        blocks_note="joint video+audio blocks; the audio stream's attention and feed-forward count too",
    ),
    Family(
        name="wan",
        docs_name="Wan 2.1",
        cls="WanTransformer3DModel",
        presets={
            "t2v-14b": Preset({}, VIDEO_480P, 14.29),
            "t2v-1.3b": Preset({"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30}, VIDEO_480P, 1.42),
            "tiny": Preset(TINY_WAN, TINY_VIDEO),
        },
        inputs=wan_inputs,
        latents=patched((1, 2, 2)),
        block_lists={"blocks": FIRST_ARG},
        attention=("attn1", "attn2"),
        feed_forward=("ffn",),
    ),
    Family(
        name="anyflow",
        docs_name="AnyFlow (Anima)",
        cls="AnyFlowTransformer3DModel",
        presets={
            "stage1": Preset({}, FamilyShape(1024, 1024, frames=1, text_tokens=512)),
            "tiny": Preset(TINY_WAN, TINY_VIDEO),
        },
        inputs=anyflow_inputs,
        latents=patched((1, 2, 2)),
        block_lists={"blocks": FIRST_ARG},
        attention=("attn1", "attn2"),
        feed_forward=("ffn",),
    ),
    Family(
        name="cosmos2",
        docs_name="Cosmos 2 Image",
        cls="CosmosTransformer3DModel",
        presets={
            "2b-t2i": Preset(
                {"num_attention_heads": 16, "rope_scale": (1.0, 4.0, 4.0), "extra_pos_embed_type": None},
                FamilyShape(512, 512, text_tokens=512),
                1.96,
            ),
            "tiny": Preset(
                {
                    "in_channels": 4,
                    "out_channels": 4,
                    "num_attention_heads": 2,
                    "attention_head_dim": 24,
                    "num_layers": 4,
                    "text_embed_dim": 32,
                    "adaln_lora_dim": 8,
                    "max_size": (8, 16, 16),
                    "patch_size": (1, 2, 2),
                    "rope_scale": (1.0, 1.0, 1.0),
                    "extra_pos_embed_type": None,
                },
                FamilyShape(64, 64, batch=2, text_tokens=8),
            ),
        },
        inputs=cosmos_inputs,
        setup=cosmos_torchvision_shim,
        latents=patched((1, 2, 2)),
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn1", "attn2"),
        feed_forward=("ff",),
    ),
    Family(
        name="cosmos3",
        docs_name="Cosmos 3",
        cls="Cosmos3OmniTransformer",
        presets={
            "default": Preset({}, FamilyShape(1024, 1024, text_tokens=256)),  # class defaults; the docs ran "edge"
            "tiny": Preset(
                {
                    "hidden_size": 32,
                    "head_dim": 16,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 1,
                    "intermediate_size": 48,
                    "num_hidden_layers": 4,
                    "latent_channel": 4,
                    "latent_patch_size": 2,
                    "patch_latent_dim": 16,
                    "vocab_size": 128,
                    "dtype": "float32",
                },
                FamilyShape(64, 64, batch=1, text_tokens=8),
            ),
        },
        inputs=cosmos3_inputs,
        latents_arg="vision_tokens",
        latents=Latents(spatial=16, patch="latent_patch_size", defaults={"latent_patch_size": 2}),
        # decoder layers carry (understanding, generation) streams: und, gen = layer(und, gen, rotary)
        block_lists={"layers": FIRST_TWO_ARGS},
        attention=("self_attn",),
        feed_forward=("mlp", "mlp_moe_gen"),
        lora_targets=("to_q", "to_k", "to_v", "to_out"),
        blocks_note="mixture-of-transformers decoder layers; the sequence is packed (batch 1 per cell)",
    ),
    Family(
        name="kandinsky5",
        docs_name="Kandinsky 5",
        cls="Kandinsky5Transformer3DModel",
        presets={
            "t2v-lite": Preset(
                {
                    "in_visual_dim": 16,
                    "out_visual_dim": 16,
                    "model_dim": 1792,
                    "ff_dim": 7168,
                    "num_text_blocks": 2,
                    "num_visual_blocks": 32,
                    "visual_cond": True,
                    "time_dim": 512,
                    "axes_dims": (16, 24, 24),
                },
                FamilyShape(512, 768, frames=81, text_tokens=256),
                2.01,
            ),
            "tiny": Preset(
                {
                    "in_visual_dim": 4,
                    "out_visual_dim": 4,
                    "in_text_dim": 24,
                    "in_text_dim2": 16,
                    "time_dim": 16,
                    "model_dim": 32,
                    "ff_dim": 48,
                    "num_text_blocks": 1,
                    "num_visual_blocks": 4,
                    "axes_dims": (4, 6, 6),
                    "visual_cond": True,
                },
                TINY_VIDEO,
            ),
        },
        inputs=kandinsky5_inputs,
        latents=patched((1, 2, 2)),
        block_lists={"text_transformer_blocks": FIRST_ARG, "visual_transformer_blocks": FIRST_ARG},
        attention=("self_attention", "cross_attention"),
        feed_forward=("feed_forward",),
        lora_targets=("to_query", "to_key", "to_value", "self_attention.out_layer", "cross_attention.out_layer"),
        fp32_inputs=("time_embed",),  # from time_embeddings, which the class keeps in fp32
    ),
    Family(
        name="minimax-h3",
        docs_name="MiniMax H3",
        cls="MiniMaxH3Transformer3DModel",
        presets={
            "h3": Preset({}, FamilyShape(480, 832, frames=49, batch=1, text_tokens=256)),
            "tiny": Preset(
                {
                    "num_attention_heads": 2,
                    "attention_head_dim": 24,
                    "hidden_size": 48,
                    "num_layers": 4,
                    "num_refiner_layers": 1,
                    "ffn_dim": 48,
                    "in_channels": 4,
                    "audio_in_channels": 8,
                    "text_dim": 24,
                    "freq_dim": 16,
                    "time_embed_hidden_dim": 32,
                    "time_embed_dim": 16,
                    "rope_freq_dim": 4,
                },
                FamilyShape(64, 64, frames=5, batch=1, text_tokens=8),
            ),
        },
        inputs=minimax_h3_inputs,
        latents=patched((1, 2, 2)),
        block_lists={"transformer_blocks": FIRST_ARG},
        attention=("attn",),
        feed_forward=("ff",),
        fp32_inputs=("temb",),  # from time_embedder, which the class keeps in fp32
        blocks_note="joint text/video/audio blocks; the text token refiner is not checkpointed",
    ),
)
