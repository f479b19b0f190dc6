"""What the families' entries share: tiny training shapes, the call conventions of their block
lists, latent geometries, and the random inputs every input maker draws from."""

from __future__ import annotations

from ..spec import CallConvention
from .geometry import FamilyShape, Latents

PACKED = Latents(spatial=16)  # inputs come packed 2x2 at the VAE's /8: one token per 16x16 pixels
ENCODER_HIDDEN = CallConvention.state("encoder_hidden_states", "hidden_states")  # (encoder, hidden) = block(...)
HIDDEN = CallConvention.state("hidden_states")
FIRST_TWO_ARGS = CallConvention.leading(2)
IMAGE_1024 = FamilyShape(height=1024, width=1024, text_tokens=512)
TINY_IMAGE = FamilyShape(height=64, width=64, batch=2, text_tokens=8)
TINY_VIDEO = FamilyShape(height=32, width=32, frames=5, batch=2, text_tokens=8)


def patched(size: int | tuple[int, int, int], **geometry) -> Latents:
    """Latents (/8, and /4 in time, unless `geometry` says otherwise) that the model patches by its
    config's `patch_size`: `size` where a preset does not set it (a (t, h, w) tuple for video)."""
    return Latents(patch="patch_size", defaults={"patch_size": size}, **geometry)


def randn(generator, device, dtype, *shape):
    from ..workload import random_normal

    return random_normal(shape, device, dtype, generator)


def timestep(batch, device, scale: float, generator):
    """Flow-matching times in the family's scale (1000 for most, 1 for t/1000 families)."""
    import torch

    return torch.rand(batch, generator=generator, device=device) * scale


def grid_ids(h, w, axes, device, leading=0):
    """Position ids (h*w, axes): column 0 (or the time axis) zero, then row and column indices."""
    import torch

    ids = torch.zeros(h, w, axes, device=device)
    ids[..., leading + 1] = torch.arange(h, device=device)[:, None]
    ids[..., leading + 2] = torch.arange(w, device=device)[None, :]
    return ids.reshape(h * w, axes)
