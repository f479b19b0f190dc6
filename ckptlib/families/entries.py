"""One entry per docs family: class, presets, inputs, blocks, LoRA targets.

Real presets are the published configs (../notes/families.md in the design notes) with the docs'
training shape; `tiny` presets keep the architecture's structure at a size that trains in well
under a second on a CPU.
"""
from __future__ import annotations

import torch

from ..apply import FIRST_ARG, CallConvention
from .geometry import FamilyShape, Latents
from .registry import Family, Preset, register

PACKED = Latents(spatial=16)  # inputs come packed 2x2 at the VAE's /8: one token per 16x16 pixels
PATCHED = Latents(patch="patch_size")  # /8 latents, patched by the model
VIDEO = Latents(patch="patch_size")  # /8 and /4 in time, a (t, h, w) patch

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


def flux2_inputs(config, shape, device, dtype, g):
    h, w, b = shape.height // 16, shape.width // 16, shape.batch
    img_ids = torch.zeros(h, w, 4, device=device)
    img_ids[..., 1] = torch.arange(h, device=device)[:, None]
    img_ids[..., 2] = torch.arange(w, device=device)[None, :]
    txt_ids = torch.zeros(shape.text_tokens, 4, device=device)
    txt_ids[:, 3] = torch.arange(shape.text_tokens, device=device)
    kwargs = {
        "hidden_states": _randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "img_ids": img_ids.reshape(1, h * w, 4).expand(b, -1, -1),
        "txt_ids": txt_ids.reshape(1, -1, 4).expand(b, -1, -1),
    }
    if config.guidance_embeds:
        kwargs["guidance"] = torch.full((b,), 4.0, device=device, dtype=dtype)
    return kwargs


def unet_inputs(config, shape, device, dtype, g):
    b = shape.batch
    text_dim = config.encoder_hid_dim or config.cross_attention_dim
    kwargs = {
        "sample": _randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timestep": _timestep(b, device, 1000.0, g),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, text_dim),
    }
    if config.addition_embed_type == "text_time":
        pooled = config.projection_class_embeddings_input_dim - 6 * config.addition_time_embed_dim
        kwargs["added_cond_kwargs"] = {
            "text_embeds": _randn(g, device, dtype, b, pooled),
            "time_ids": torch.tensor([[shape.height, shape.width, 0, 0, shape.height, shape.width]] * b,
                                     device=device, dtype=dtype),
        }
    return kwargs


def unet_block_lists(model) -> dict:
    """Every resnet and transformer list of the down, mid and up blocks; they interleave inside a
    UNet block, so each module is its own region (no interval or stride grouping)."""
    lists = {}
    stages = [(f"down_blocks.{i}", b) for i, b in enumerate(model.down_blocks)] + [("mid_block", model.mid_block)] \
        + [(f"up_blocks.{i}", b) for i, b in enumerate(model.up_blocks)]
    for prefix, stage in stages:
        for kind in ("resnets", "attentions"):
            if len(getattr(stage, kind, ())):
                lists[f"{prefix}.{kind}"] = None
    return lists


def stable_cascade_inputs(config, shape, device, dtype, g):
    b = shape.batch
    side = max(shape.height // 42, 8)  # stage C latents: 1024 px -> 24 x 24
    return {
        "sample": _randn(g, device, dtype, b, config.in_channels, side, side),
        "timestep_ratio": _timestep(b, device, 1.0, g).to(dtype),
        "clip_text_pooled": _randn(g, device, dtype, b, 1, config.clip_text_pooled_in_channels),
        "clip_text": _randn(g, device, dtype, b, shape.text_tokens, config.clip_text_in_channels),
        "clip_img": _randn(g, device, dtype, b, 1, config.clip_image_in_channels),
    }


def stable_cascade_block_lists(model) -> dict:
    """Stage C's down/up blocks are flat lists of Res/Timestep/Attention micro-blocks, each called
    with different extra arguments (and repeated by the repeat mappers): per micro-block regions."""
    return {**{f"down_blocks.{i}": None for i in range(len(model.down_blocks))},
            **{f"up_blocks.{i}": None for i in range(len(model.up_blocks))}}


def _grid_ids(h, w, axes, device, leading=0):
    """Position ids (h*w, axes): column 0 (or the time axis) zero, then row and column indices."""
    ids = torch.zeros(h, w, axes, device=device)
    ids[..., leading + 1] = torch.arange(h, device=device)[:, None]
    ids[..., leading + 2] = torch.arange(w, device=device)[None, :]
    return ids.reshape(h * w, axes)


def flux3_inputs(config, shape, device, dtype, g):
    h, w, b = shape.height // 16, shape.width // 16, shape.batch
    txt_ids = torch.zeros(shape.text_tokens, 4, device=device)
    txt_ids[:, 3] = torch.arange(shape.text_tokens, device=device)
    return {
        "hidden_states": _randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.joint_attention_dim),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "img_ids": _grid_ids(h, w, 4, device).to(dtype),
        "txt_ids": txt_ids.to(dtype),
    }


def krea2_inputs(config, shape, device, dtype, g):
    h, w, b, t = shape.height // 16, shape.width // 16, shape.batch, shape.text_tokens
    text_ids = torch.zeros(t, 3, device=device)
    text_ids[:, 0] = torch.arange(t, device=device)
    return {
        "hidden_states": _randn(g, device, dtype, b, h * w, config.in_channels),
        # hidden states of several text-encoder layers, fused by the model
        "encoder_hidden_states": _randn(g, device, dtype, b, t, config.num_text_layers, config.text_hidden_dim),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "position_ids": torch.cat([text_ids, _grid_ids(h, w, 3, device)]).long(),
        "encoder_attention_mask": torch.ones(b, t, device=device, dtype=torch.bool),
    }


def ernie_inputs(config, shape, device, dtype, g):
    b = shape.batch
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, shape.height // 16, shape.width // 16),
        "timestep": _timestep(b, device, 1000.0, g),
        "text_bth": _randn(g, device, dtype, b, shape.text_tokens, config.text_in_dim),
        "text_lens": torch.full((b,), shape.text_tokens, device=device, dtype=torch.long),
    }


def ideogram4_inputs(config, shape, device, dtype, g):
    """One packed sequence per sample: text (LLM) tokens, then the image tokens to denoise."""
    h, w, b, t = shape.height // 16, shape.width // 16, shape.batch, shape.text_tokens
    length = t + h * w
    positions = torch.cat([torch.arange(t, device=device)[:, None].expand(t, 3),
                           _grid_ids(h, w, 3, device).long() + t])
    indicator = torch.cat([torch.full((t,), 3, device=device), torch.full((h * w,), 2, device=device)])  # LLM, image
    return {
        "hidden_states": _randn(g, device, dtype, b, length, config.in_channels),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "encoder_hidden_states": _randn(g, device, dtype, b, length, config.llm_features_dim),
        "position_ids": positions.long()[None].expand(b, -1, -1),
        "segment_ids": torch.zeros(b, length, device=device, dtype=torch.long),
        "indicator": indicator.long()[None].expand(b, -1),
    }


def longcat_inputs(config, shape, device, dtype, g):
    kwargs = flux_inputs(config, shape, device, dtype, g, pooled=False)
    kwargs["img_ids"][:, 0] = 1.0  # image tokens sit after the text tokens on the first axis
    return kwargs


def anyflow_inputs(config, shape, device, dtype, g):
    kwargs = wan_inputs(config, shape, device, dtype, g)
    latents = kwargs["hidden_states"].transpose(1, 2).contiguous()  # (B, frames, C, H, W)
    per_frame = kwargs["timestep"][:, None].expand(-1, latents.shape[1]).contiguous()  # one time per frame
    kwargs.update(hidden_states=latents, timestep=per_frame, r_timestep=per_frame * 0.5)  # r: the target time
    return kwargs


def omnigen_inputs(config, shape, device, dtype, g):
    """Token-id prompt, then the time token, then the noisy image tokens (no input images)."""
    b, t = shape.batch, shape.text_tokens
    image_tokens = (shape.height // 8 // config.patch_size) * (shape.width // 8 // config.patch_size)
    length = t + 1 + image_tokens
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "input_ids": torch.randint(0, config.vocab_size, (b, t), generator=g, device=device),
        "input_img_latents": [], "input_image_sizes": {},
        "attention_mask": torch.ones(b, length, length, device=device, dtype=dtype),
        "position_ids": torch.arange(length, device=device)[None].expand(b, -1),
    }


def hidream_inputs(config, shape, device, dtype, g):
    b, t = shape.batch, shape.text_tokens
    llama_layers = max(config.llama_layers) + 1
    return {
        "hidden_states": _randn(g, device, dtype, b, config.in_channels, shape.height // 8, shape.width // 8),
        "timesteps": _timestep(b, device, 1000.0, g),
        "encoder_hidden_states_t5": _randn(g, device, dtype, b, t, config.caption_channels[0]),
        "encoder_hidden_states_llama3": _randn(g, device, dtype, llama_layers, b, t, config.caption_channels[1]),
        "pooled_embeds": _randn(g, device, dtype, b, config.text_emb_dim),
    }


def kandinsky5_inputs(config, shape, device, dtype, g):
    """Channels-last video latents (B, frames, h, w, C), with the visual-conditioning channels when
    the model takes them; rope positions per axis; Qwen text states and a CLIP pooled vector."""
    b, t = shape.batch, ((shape.frames or 1) - 1) // 4 + 1
    h, w = shape.height // 8, shape.width // 8
    channels = 2 * config.in_visual_dim + 1 if config.visual_cond else config.in_visual_dim
    patch = config.patch_size
    return {
        "hidden_states": _randn(g, device, dtype, b, t, h, w, channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.in_text_dim),
        "timestep": _timestep(b, device, 1000.0, g).to(dtype),
        "pooled_projections": _randn(g, device, dtype, b, config.in_text_dim2),
        "visual_rope_pos": [torch.arange(t // patch[0], device=device), torch.arange(h // patch[1], device=device),
                            torch.arange(w // patch[2], device=device)],
        "text_rope_pos": torch.arange(shape.text_tokens, device=device),
    }


def ace_step_inputs(config, shape, device, dtype, g):
    """Audio latents as a 1-D sequence (frames play the role of length), concatenated by the model
    with the context latents along channels."""
    b, length = shape.batch, shape.frames
    acoustic = config.audio_acoustic_hidden_dim
    return {
        "hidden_states": _randn(g, device, dtype, b, length, acoustic),
        "context_latents": _randn(g, device, dtype, b, length, config.in_channels - acoustic),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "timestep_r": torch.zeros(b, device=device, dtype=dtype),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens,
                                        config.encoder_hidden_size or config.hidden_size),
    }


def minimax_h3_inputs(config, shape, device, dtype, g):
    """One packed sample: text, video and audio tokens in one sequence, addressed by index tensors;
    one timestep, modality tags 0 (text), 1 (video), 2 (audio)."""
    t = ((shape.frames or 1) - 1) // 4 + 1
    p_t, p_h, p_w = config.patch_size
    h, w = shape.height // 8 // p_h, shape.width // 8 // p_w  # tokens per frame after the patch embedding
    n_text, n_video, n_audio = shape.text_tokens, t // p_t * h * w, max(t * 4, 4)
    length = n_text + n_video + n_audio
    video_positions = _grid_ids(h, w, 3, device).repeat(t // p_t, 1)
    video_positions[:, 0] = torch.arange(t // p_t, device=device).repeat_interleave(h * w)
    positions = torch.cat([torch.arange(n_text, device=device)[:, None].expand(n_text, 3).float(),
                           video_positions, torch.arange(n_audio, device=device)[:, None].expand(n_audio, 3).float()])
    tags = torch.cat([torch.zeros(n_text), torch.ones(n_video), torch.full((n_audio,), 2.0)]).long().to(device)
    index = torch.arange(length, device=device)
    return {
        "hidden_states": _randn(g, device, dtype, 1, n_video, config.in_channels * p_t * p_h * p_w),
        "audio_hidden_states": _randn(g, device, dtype, 1, n_audio, config.audio_in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, 1, n_text, config.text_dim),
        "timestep": _timestep(1, device, 1000.0, g),
        "timestep_indices": torch.zeros(length, device=device, dtype=torch.long),
        "token_tags": tags, "position_ids": positions.long(),
        "text_indices": index[:n_text], "video_indices": index[n_text:n_text + n_video],
        "audio_indices": index[n_text + n_video:],
    }


def qwen_image21_inputs(config, shape, device, dtype, g):
    """Text slots then one slot per 2x2 group of packed target latents (`img_mask` marks image slots)."""
    h, w, b, t = shape.height // 16, shape.width // 16, shape.batch, shape.text_tokens
    slots = torch.cat([torch.zeros(b, t, dtype=torch.bool), torch.ones(b, h * w // 4, dtype=torch.bool)], dim=1)
    return {
        "hidden_states": _randn(g, device, dtype, b, h * w, config.in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, t, config.context_in_dim),
        "encoder_hidden_states_mask": torch.ones(b, t, device=device, dtype=torch.bool),
        "timestep": _timestep(b, device, 1.0, g).to(dtype),
        "img_shapes": [[(1, h, w)]] * b,
        "img_mask": slots.to(device),
    }


def ltx2_inputs(config, shape, device, dtype, g):
    """Packed video tokens plus an audio track of the clip's length; text states for both streams."""
    b = shape.batch
    t = ((shape.frames or 1) - 1) // config.vae_scale_factors[0] + 1
    h, w = shape.height // config.vae_scale_factors[1], shape.width // config.vae_scale_factors[2]
    audio_frames = max(4, round((shape.frames or 1) / 24 * config.audio_sampling_rate / config.audio_hop_length
                                / config.audio_scale_factor))
    sigma = _timestep(b, device, 1.0, g).to(dtype)
    return {
        "hidden_states": _randn(g, device, dtype, b, t * h * w, config.in_channels),
        "audio_hidden_states": _randn(g, device, dtype, b, audio_frames, config.audio_in_channels),
        "encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "audio_encoder_hidden_states": _randn(g, device, dtype, b, shape.text_tokens, config.caption_channels),
        "timestep": sigma, "sigma": sigma,
        "encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device),
        "audio_encoder_attention_mask": torch.ones(b, shape.text_tokens, device=device),
        "num_frames": t, "height": h, "width": w, "fps": 24.0, "audio_num_frames": audio_frames,
    }


def cosmos3_inputs(config, shape, device, dtype, g):
    """One packed sample: prompt token ids (the understanding stream), then the noisy video latent's
    patches (the generation stream); every latent frame is noisy and in the loss."""
    p, t = config.latent_patch_size, ((shape.frames or 1) - 1) // 4 + 1
    h, w = shape.height // 16, shape.width // 16  # latent pixels (the VAE downsamples 16x)
    n_text, n_vision = shape.text_tokens, t * (h // p) * (w // p)
    length = n_text + n_vision
    vision = torch.arange(n_text, length, device=device)
    return {
        "input_ids": torch.randint(0, config.vocab_size, (n_text,), generator=g, device=device),
        "text_indexes": torch.arange(n_text, device=device),
        "position_ids": torch.arange(length, device=device)[None].expand(3, -1),
        "und_len": n_text, "sequence_length": length,
        "vision_tokens": [_randn(g, device, dtype, 1, config.latent_channel, t, h, w)],
        "vision_token_shapes": [(t, h // p, w // p)],
        "vision_sequence_indexes": vision, "vision_mse_loss_indexes": vision,
        "vision_timesteps": torch.full((n_vision,), float(_timestep(1, device, 1.0, g)), device=device, dtype=dtype),
        "vision_noisy_frame_indexes": [torch.arange(t, device=device)],
    }


# ---- entries ------------------------------------------------------------------------------------------

IMAGE_1024 = FamilyShape(height=1024, width=1024, text_tokens=512)
TINY_WAN = {"num_attention_heads": 2, "attention_head_dim": 12, "in_channels": 4, "out_channels": 4, "text_dim": 32,
            "freq_dim": 32, "ffn_dim": 48, "num_layers": 4, "rope_max_seq_len": 32}  # Wan and AnyFlow
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
        latents=PACKED,
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
        latents=PACKED,
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
        latents=PATCHED,
        block_lists={"transformer_blocks": ENCODER_HIDDEN},
        attention=("attn", "attn2"), feed_forward=("ff", "ff_context"),
    ),
    Family(
        name="wan", docs_name="Wan 2.1", cls="WanTransformer3DModel",
        presets={
            "t2v-14b": Preset({}, FamilyShape(480, 832, frames=81, text_tokens=512), 14.29),
            "t2v-1.3b": Preset({"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30},
                               FamilyShape(480, 832, frames=81, text_tokens=512), 1.42),
            "tiny": Preset(TINY_WAN, FamilyShape(32, 32, frames=5, batch=2, text_tokens=8)),
        },
        inputs=wan_inputs,
        latents=VIDEO,
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
        latents=PATCHED,
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
        latents=PACKED,
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
        latents=PATCHED,
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
        latents=Latents(spatial=32, patch="patch_size"),
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
        latents=Latents(spatial=32, patch="patch_size"),
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
        latents=PATCHED,
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
        latents=Latents(patch="patch_size", patch_t="patch_size_t"),
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
        latents=Latents(spatial=32, temporal=8, patch="patch_size", patch_t="patch_size_t"),
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
        latents=VIDEO,
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
        latents=Latents(patch=2),
        block_lists={"noise_refiner": FIRST_ARG, "context_refiner": FIRST_ARG, "layers": FIRST_ARG},
        attention=("attention",), feed_forward=("feed_forward",),
        blocks_note="noise and context refiners are checkpointed as block lists of their own; the model pads "
                    "image and caption tokens to multiples of 32",
    ),
)

NO_CLASS = "no diffusers class for this architecture in the installed diffusers (the docs ran it through its trainer's own code)"
register(*(Family(name=name, docs_name=docs_name, cls=None, unsupported=NO_CLASS) for name, docs_name in [
    ("boogu-image", "Boogu Image"), ("heartmula", "HeartMula"), ("longcat-video", "LongCat Video"),
    ("mageflow", "MageFlow"), ("wan-s2v", "Wan S2V"), ("zlab-i1", "ZLab I1"),
]))

UNET_ATTENTION = ("transformer_blocks.*.attn1", "transformer_blocks.*.attn2")
UNET_FFN = ("transformer_blocks.*.ff",)
UNET_NOTE = ("a block is one UNet module: each ResnetBlock2D and each Transformer2DModel of the down, mid and "
             "up blocks is its own checkpointed region; they interleave, so interval and stride do not apply")
TINY_UNET = {"sample_size": 8, "block_out_channels": (32, 64), "layers_per_block": 1, "norm_num_groups": 8,
             "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"), "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
             "cross_attention_dim": 32, "attention_head_dim": 8}
SDXL = {"sample_size": 128, "block_out_channels": (320, 640, 1280),
        "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
        "transformer_layers_per_block": (1, 2, 10), "attention_head_dim": (5, 10, 20), "cross_attention_dim": 2048,
        "use_linear_projection": True, "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
        "projection_class_embeddings_input_dim": 2816}
TINY_SDXL = {**TINY_UNET, "transformer_layers_per_block": (2, 1), "use_linear_projection": True,
             "addition_embed_type": "text_time", "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 64}

register(
    Family(
        name="flux2", docs_name="Flux.2", cls="Flux2Transformer2DModel",
        presets={
            "dev": Preset({}, IMAGE_1024, 32.22),
            "klein-4b": Preset({"num_layers": 5, "num_single_layers": 20, "num_attention_heads": 24, "joint_attention_dim": 7680,
                                "guidance_embeds": False}, FamilyShape(512, 512, text_tokens=512), 3.88),
            "klein-9b": Preset({"num_layers": 8, "num_single_layers": 24, "num_attention_heads": 32, "joint_attention_dim": 12288,
                                "guidance_embeds": False}, FamilyShape(512, 512, text_tokens=512), 9.08),
            "tiny": Preset({"num_layers": 2, "num_single_layers": 4, "attention_head_dim": 16, "num_attention_heads": 2,
                            "joint_attention_dim": 32, "in_channels": 16, "axes_dims_rope": (4, 4, 4, 4),
                            "timestep_guidance_channels": 16}, TINY_IMAGE),
        },
        inputs=flux2_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": HIDDEN},
        attention=("attn",), feed_forward=("ff", "ff_context"),
        lora_targets=("to_q", "to_k", "to_v", "to_out.0", "to_qkv_mlp_proj"),
        blocks_note="single blocks fuse attention and MLP (to_qkv_mlp_proj): FFN modes cover the double blocks",
    ),
    Family(
        name="sd1x", docs_name="SD 1.x", cls="UNet2DConditionModel",
        presets={
            "sd15": Preset({"sample_size": 64, "cross_attention_dim": 768}, FamilyShape(512, 512, text_tokens=77), 0.86),
            "tiny": Preset(TINY_UNET, TINY_IMAGE),
        },
        inputs=unet_inputs, latents_arg="sample", block_lists=unet_block_lists,
        attention=UNET_ATTENTION, feed_forward=UNET_FFN, blocks_note=UNET_NOTE,
    ),
    Family(
        name="sdxl", docs_name="SDXL", cls="UNet2DConditionModel",
        presets={"sdxl": Preset(SDXL, FamilyShape(1024, 1024, text_tokens=77), 2.57), "tiny": Preset(TINY_SDXL, TINY_IMAGE)},
        inputs=unet_inputs, latents_arg="sample", block_lists=unet_block_lists,
        attention=UNET_ATTENTION, feed_forward=UNET_FFN, blocks_note=UNET_NOTE,
    ),
    Family(
        name="kolors", docs_name="Kolors", cls="UNet2DConditionModel",
        presets={
            "kolors": Preset({**SDXL, "projection_class_embeddings_input_dim": 5632, "encoder_hid_dim": 4096,
                              "encoder_hid_dim_type": "text_proj"}, FamilyShape(1024, 1024, text_tokens=256), 2.58),
            "tiny": Preset({**TINY_SDXL, "projection_class_embeddings_input_dim": 72, "encoder_hid_dim": 24,
                            "encoder_hid_dim_type": "text_proj"}, TINY_IMAGE),
        },
        inputs=unet_inputs, latents_arg="sample", block_lists=unet_block_lists,
        attention=UNET_ATTENTION, feed_forward=UNET_FFN, blocks_note=UNET_NOTE,
    ),
    Family(
        name="stable-cascade", docs_name="Stable Cascade", cls="StableCascadeUNet",
        presets={
            "stage-c": Preset({"clip_text_in_channels": 1280, "clip_image_in_channels": 768, "switch_level": [False]},
                              FamilyShape(1024, 1024, text_tokens=77), 3.59),
            "tiny": Preset({"in_channels": 4, "out_channels": 4, "timestep_ratio_embedding_dim": 16, "patch_size": 1,
                            "conditioning_dim": 32, "block_out_channels": (32, 32), "num_attention_heads": (2, 2),
                            "down_num_layers_per_block": (1, 1), "up_num_layers_per_block": (1, 1),
                            "down_blocks_repeat_mappers": (1, 1), "up_blocks_repeat_mappers": (1, 1),
                            "clip_text_in_channels": 16, "clip_text_pooled_in_channels": 16, "clip_image_in_channels": 16,
                            "clip_seq": 2, "effnet_in_channels": None, "pixel_mapper_in_channels": None,
                            "switch_level": [False]}, FamilyShape(336, 336, batch=2, text_tokens=8)),
        },
        inputs=stable_cascade_inputs, latents_arg="sample", block_lists=stable_cascade_block_lists,
        attention=("attention",), lora_targets=("to_q", "to_k", "to_v", "to_out.0"),
        reasons={"feed_forward": "stage C's micro-blocks have no attention / feed-forward split"},
        blocks_note="a block is one Res/Timestep/Attention micro-block of stage C's down and up blocks",
    ),
)

register(
    Family(
        name="flux3-klein", docs_name="Flux.3 Image Klein", cls="Flux3Transformer2DModel",
        presets={
            "klein-base": Preset({}, FamilyShape(512, 512, text_tokens=80)),
            "tiny": Preset({"in_channels": 16, "cond_in_channels": 16, "num_layers": 2, "num_single_layers": 4,
                            "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 32,
                            "timestep_channels": 16, "axes_dims_rope": (4, 4, 4, 4)}, TINY_IMAGE),
        },
        inputs=flux3_inputs,
        latents=PACKED,
        block_lists={"txt_mode_blocks": FIRST_ARG, "mode_blocks.image": FIRST_ARG,
                     "single_transformer_blocks": ENCODER_HIDDEN},
        attention=("attn",), feed_forward=("ff",),
        blocks_note="text, image and joint stream blocks are segmented separately, as in the docs",
    ),
    Family(
        name="krea2", docs_name="Krea 2", cls="Krea2Transformer2DModel",
        presets={
            "raw": Preset({}, FamilyShape(512, 512, text_tokens=128)),
            "tiny": Preset({"in_channels": 16, "num_layers": 4, "attention_head_dim": 16, "num_attention_heads": 2,
                            "num_key_value_heads": 1, "intermediate_size": 48, "timestep_embed_dim": 16,
                            "text_hidden_dim": 24, "num_text_layers": 2, "text_num_attention_heads": 2,
                            "text_num_key_value_heads": 2, "text_intermediate_size": 32, "num_layerwise_text_blocks": 1,
                            "num_refiner_text_blocks": 1, "axes_dims_rope": (4, 6, 6)}, TINY_IMAGE),
        },
        inputs=krea2_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": FIRST_ARG},
        attention=("attn",), feed_forward=("ff",),
        blocks_note="the joint transformer blocks; the text-fusion stack is not checkpointed",
    ),
    Family(
        name="ernie-image", docs_name="ERNIE 4.5 Image", cls="ErnieImageTransformer2DModel",
        presets={
            "base": Preset({}, FamilyShape(512, 512, text_tokens=128)),
            "tiny": Preset({"hidden_size": 32, "num_attention_heads": 2, "num_layers": 4, "ffn_hidden_size": 48,
                            "in_channels": 16, "out_channels": 16, "text_in_dim": 24, "rope_axes_dim": (4, 6, 6)},
                           TINY_IMAGE),
        },
        inputs=ernie_inputs,
        latents=Latents(spatial=16, patch="patch_size"),
        block_lists={"layers": FIRST_ARG},
        attention=("self_attention",), feed_forward=("mlp",),
    ),
    Family(
        name="ideogram4", docs_name="Ideogram 4.0", cls="Ideogram4Transformer2DModel",
        presets={
            "fp8": Preset({}, FamilyShape(1024, 1024, text_tokens=128)),
            "tiny": Preset({"in_channels": 16, "num_layers": 4, "attention_head_dim": 16, "num_attention_heads": 2,
                            "intermediate_size": 48, "adaln_dim": 16, "llm_features_dim": 24, "mrope_section": (2, 2, 2)},
                           TINY_IMAGE),
        },
        inputs=ideogram4_inputs,
        latents=PACKED,
        block_lists={"layers": FIRST_ARG},
        attention=("attention",), feed_forward=("feed_forward",),
    ),
    Family(
        name="longcat-image", docs_name="LongCat Image", cls="LongCatImageTransformer2DModel",
        presets={
            "default": Preset({}, FamilyShape(512, 512, text_tokens=512)),
            "tiny": Preset({"in_channels": 16, "num_layers": 2, "num_single_layers": 4, "attention_head_dim": 16,
                            "num_attention_heads": 2, "joint_attention_dim": 32, "pooled_projection_dim": 32,
                            "axes_dims_rope": [4, 6, 6]}, TINY_IMAGE),
        },
        inputs=longcat_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": ENCODER_HIDDEN, "single_transformer_blocks": ENCODER_HIDDEN},
        attention=("attn",), feed_forward=("ff", "ff_context"),
        blocks_note="single blocks fuse the MLP into the attention path: FFN modes cover the double blocks",
    ),
)

register(
    Family(
        name="anyflow", docs_name="AnyFlow (Anima)", cls="AnyFlowTransformer3DModel",
        presets={
            "stage1": Preset({}, FamilyShape(1024, 1024, frames=1, text_tokens=512)),
            "tiny": Preset(TINY_WAN, FamilyShape(32, 32, frames=5, batch=2, text_tokens=8)),
        },
        inputs=anyflow_inputs,
        latents=VIDEO,
        block_lists={"blocks": FIRST_ARG},
        attention=("attn1", "attn2"), feed_forward=("ffn",),
    ),
)

register(
    Family(
        name="omnigen", docs_name="OmniGen", cls="OmniGenTransformer2DModel",
        presets={
            "v1": Preset({"rope_scaling": {"type": "su", "short_factor": [1.0] * 48, "long_factor": [1.0] * 48}},
                         FamilyShape(1024, 1024, text_tokens=64), 3.76),
            "tiny": Preset({"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 48,
                            "num_layers": 4, "vocab_size": 128, "pad_token_id": 0, "in_channels": 4, "pos_embed_max_size": 16,
                            "max_position_embeddings": 512, "original_max_position_embeddings": 256, "time_step_dim": 16,
                            "rope_scaling": {"type": "su", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8}},
                           TINY_IMAGE),
        },
        inputs=omnigen_inputs,
        latents=PATCHED,
        block_lists={"layers": FIRST_ARG},
        attention=("self_attn",), feed_forward=("mlp",),
    ),
    Family(
        name="hidream", docs_name="HiDream", cls="HiDreamImageTransformer2DModel",
        presets={
            "i1-full": Preset({"patch_size": 2, "in_channels": 16, "out_channels": 16, "axes_dims_rope": (64, 32, 32),
                               "caption_channels": [4096, 4096], "llama_layers": list(range(32)) + [31] * 16,
                               "force_inference_output": False}, FamilyShape(512, 512, text_tokens=128), 17.11),
            "tiny": Preset({"patch_size": 2, "in_channels": 4, "out_channels": 4, "num_layers": 2, "num_single_layers": 2,
                            "attention_head_dim": 16, "num_attention_heads": 2, "caption_channels": [24, 24],
                            "text_emb_dim": 16, "num_routed_experts": 2, "num_activated_experts": 1,
                            "axes_dims_rope": (4, 6, 6), "max_resolution": (64, 64), "llama_layers": [0, 1, 1, 1],
                            "force_inference_output": False}, TINY_IMAGE),
        },
        inputs=hidream_inputs,
        latents=PATCHED,
        # Each block gets its own Llama layer's states from the loop: per-block regions only.
        block_lists={"double_stream_blocks": None, "single_stream_blocks": None},
        attention=("block.attn1",), feed_forward=("block.ff_i", "block.ff_t"),
        lora_targets=("to_q", "to_k", "to_v", "to_out"),
        blocks_note="blocks are HiDreamBlock wrappers; the image feed-forward is a mixture of experts (trained "
                    "in train mode, force_inference_output=False); image tokens are padded to max_resolution's count",
    ),
)

register(
    Family(
        name="kandinsky5", docs_name="Kandinsky 5", cls="Kandinsky5Transformer3DModel",
        presets={
            "t2v-lite": Preset({"in_visual_dim": 16, "out_visual_dim": 16, "model_dim": 1792, "ff_dim": 7168,
                                "num_text_blocks": 2, "num_visual_blocks": 32, "visual_cond": True, "time_dim": 512,
                                "axes_dims": (16, 24, 24)}, FamilyShape(512, 768, frames=81, text_tokens=256), 2.01),
            "tiny": Preset({"in_visual_dim": 4, "out_visual_dim": 4, "in_text_dim": 24, "in_text_dim2": 16, "time_dim": 16,
                            "model_dim": 32, "ff_dim": 48, "num_text_blocks": 1, "num_visual_blocks": 4,
                            "axes_dims": (4, 6, 6), "visual_cond": True}, TINY_VIDEO),
        },
        inputs=kandinsky5_inputs,
        latents=VIDEO,
        block_lists={"text_transformer_blocks": FIRST_ARG, "visual_transformer_blocks": FIRST_ARG},
        attention=("self_attention", "cross_attention"), feed_forward=("feed_forward",),
        lora_targets=("to_query", "to_key", "to_value", "self_attention.out_layer", "cross_attention.out_layer"),
        fp32_inputs=("time_embed",),  # from time_embeddings, which the class keeps in fp32
    ),
)

register(
    Family(
        name="ace-step", docs_name="ACE Step 1.5", cls="AceStepTransformer1DModel",
        presets={
            "v15-base": Preset({}, FamilyShape(1, 1, frames=1500, text_tokens=256)),
            "tiny": Preset({"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 2,
                            "num_key_value_heads": 1, "head_dim": 16, "in_channels": 24, "audio_acoustic_hidden_dim": 8,
                            "patch_size": 2, "sliding_window": 8}, FamilyShape(1, 1, frames=32, batch=2, text_tokens=8)),
        },
        inputs=ace_step_inputs,
        latents=Latents(spatial=1, temporal=1, patch_t="patch_size"),
        # Layers alternate sliding-window and full attention masks chosen by index: per-layer regions only.
        block_lists={"layers": None},
        attention=("self_attn", "cross_attn"), feed_forward=("mlp",),
        blocks_note="audio: a preset's frames are latent frames of the 1-D audio sequence",
    ),
    Family(
        name="minimax-h3", docs_name="MiniMax H3", cls="MiniMaxH3Transformer3DModel",
        presets={
            "h3": Preset({}, FamilyShape(480, 832, frames=49, batch=1, text_tokens=256)),
            "tiny": Preset({"num_attention_heads": 2, "attention_head_dim": 24, "hidden_size": 48, "num_layers": 4,
                            "num_refiner_layers": 1, "ffn_dim": 48, "in_channels": 4, "audio_in_channels": 8,
                            "text_dim": 24, "freq_dim": 16, "time_embed_hidden_dim": 32, "time_embed_dim": 16,
                            "rope_freq_dim": 4}, FamilyShape(64, 64, frames=5, batch=1, text_tokens=8)),
        },
        inputs=minimax_h3_inputs,
        latents=VIDEO,
        block_lists={"transformer_blocks": FIRST_ARG},
        attention=("attn",), feed_forward=("ff",),
        fp32_inputs=("temb",),  # from time_embedder, which the class keeps in fp32
        blocks_note="joint text/video/audio blocks; the text token refiner is not checkpointed",
    ),
)

register(
    Family(
        name="qwen-image21", docs_name="Qwen Image 2.1", cls="QwenImage21Transformer2DModel",
        presets={
            "v2.1": Preset({}, FamilyShape(512, 512, text_tokens=10)),
            "tiny": Preset({"in_channels": 16, "out_channels": 16, "num_layers": 4, "attention_head_dim": 16,
                            "num_attention_heads": 2, "context_in_dim": 24, "axes_dims_rope": (4, 6, 6)}, TINY_IMAGE),
        },
        inputs=qwen_image21_inputs,
        latents=PACKED,
        block_lists={"transformer_blocks": HIDDEN},
        attention=("attn",), feed_forward=("img_mlp",),
        blocks_note="one joint text+image stream; grouped regions need the KV cache off (it is, in training)",
    ),
)

register(
    Family(
        name="ltxvideo2", docs_name="LTXVideo2", cls="LTX2VideoTransformer3DModel",
        presets={
            "2.3-dev": Preset({}, FamilyShape(704, 1280, frames=49, text_tokens=256), 18.88),
            "tiny": Preset({"in_channels": 8, "out_channels": 8, "num_attention_heads": 2, "attention_head_dim": 8,
                            "cross_attention_dim": 16, "audio_in_channels": 8, "audio_out_channels": 8,
                            "audio_num_attention_heads": 2, "audio_attention_head_dim": 8, "audio_cross_attention_dim": 16,
                            "num_layers": 4, "caption_channels": 24}, FamilyShape(64, 64, frames=9, batch=2, text_tokens=8)),
        },
        inputs=ltx2_inputs,
        latents=Latents(spatial=32, temporal=8, patch="patch_size", patch_t="patch_size_t"),
        # Training passes no spatio-temporal guidance blocks, so every block gets the same extras.
        block_lists={"transformer_blocks": CallConvention.state("hidden_states", "audio_hidden_states")},
        attention=("attn1", "attn2", "audio_attn1", "audio_attn2"), feed_forward=("ff", "audio_ff"),
        blocks_note="joint video+audio blocks; the audio stream's attention and feed-forward count too",
    ),
)

register(
    Family(
        name="cosmos3", docs_name="Cosmos 3", cls="Cosmos3OmniTransformer",
        presets={
            "default": Preset({}, FamilyShape(1024, 1024, text_tokens=256)),  # class defaults; the docs ran "edge"
            "tiny": Preset({"hidden_size": 32, "head_dim": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
                            "intermediate_size": 48, "num_hidden_layers": 4, "latent_channel": 4, "latent_patch_size": 2,
                            "patch_latent_dim": 16, "vocab_size": 128, "dtype": "float32"},
                           FamilyShape(64, 64, batch=1, text_tokens=8)),
        },
        inputs=cosmos3_inputs, latents_arg="vision_tokens",
        latents=Latents(spatial=16, patch="latent_patch_size"),
        # decoder layers carry (understanding, generation) streams: und, gen = layer(und, gen, rotary)
        block_lists={"layers": FIRST_TWO_ARGS},
        attention=("self_attn",), feed_forward=("mlp", "mlp_moe_gen"),
        lora_targets=("to_q", "to_k", "to_v", "to_out"),
        blocks_note="mixture-of-transformers decoder layers; the sequence is packed (batch 1 per cell)",
    ),
)
