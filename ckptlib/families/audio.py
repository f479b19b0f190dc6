"""Audio: ACE Step 1.5."""

from __future__ import annotations

from .common import randn, timestep
from .family import Family, Preset
from .geometry import FamilyShape, Latents


def ace_step_inputs(config, shape, device, dtype, g):
    """Audio latents as a 1-D sequence (frames play the role of length), concatenated by the model
    with the context latents along channels."""
    import torch

    b, length = shape.batch, shape.frames
    acoustic = config.audio_acoustic_hidden_dim
    return {
        "hidden_states": randn(g, device, dtype, b, length, acoustic),
        "context_latents": randn(g, device, dtype, b, length, config.in_channels - acoustic),
        "timestep": timestep(b, device, 1.0, g).to(dtype),
        "timestep_r": torch.zeros(b, device=device, dtype=dtype),
        "encoder_hidden_states": randn(
            g, device, dtype, b, shape.text_tokens, config.encoder_hidden_size or config.hidden_size
        ),
    }


FAMILIES = (
    Family(
        name="ace-step",
        docs_name="ACE Step 1.5",
        cls="AceStepTransformer1DModel",
        presets={
            "v15-base": Preset({}, FamilyShape(1, 1, frames=1500, text_tokens=256)),
            "tiny": Preset(
                {
                    "hidden_size": 32,
                    "intermediate_size": 48,
                    "num_hidden_layers": 4,
                    "num_attention_heads": 2,
                    "num_key_value_heads": 1,
                    "head_dim": 16,
                    "in_channels": 24,
                    "audio_acoustic_hidden_dim": 8,
                    "patch_size": 2,
                    "sliding_window": 8,
                },
                FamilyShape(1, 1, frames=32, batch=2, text_tokens=8),
            ),
        },
        inputs=ace_step_inputs,
        latents=Latents(spatial=1, temporal=1, patch_t="patch_size", defaults={"patch_size": 2}),
        # Layers alternate sliding-window and full attention masks chosen by index: per-layer regions only.
        block_lists={"layers": None},
        attention=("self_attn", "cross_attn"),
        feed_forward=("mlp",),
        blocks_note="audio: a preset's frames are latent frames of the 1-D audio sequence",
        sample_unit="clips",
    ),
)
