"""A family's training input and the sequence its transformer sees.

`FamilyShape` is what a preset trains on: a resolution (and frames for video), text tokens and a
batch. `Latents` says how that input becomes tokens: the VAE downsamples space (and time), the
transformer patches the latents, and each patch is a token. Flux.1 at 1024x1024: 1024 / 8 / 2 =
64, so 64 x 64 = 4096 image tokens; Wan at 480x832, 81 frames: 21 latent frames x 30 x 52 = 32760.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FamilyShape:
    """One training input: image (height x width) or video (frames) latents, text tokens, batch."""

    height: int
    width: int
    frames: int | None = None
    batch: int = 1
    text_tokens: int = 64


@dataclass(frozen=True)
class Latents:
    """Input pixels to transformer tokens.

    spatial: the VAE's spatial downsampling (8 for most, 16 where inputs come packed 2x2, 32 for DC-AE).
    temporal: the VAE's temporal downsampling for video ((frames - 1) // temporal + 1 latent frames).
    patch, patch_t: the spatial and temporal patch sizes, or the name of the config entry that holds
      one (a (t, h, w) tuple there gives both).
    defaults: what the model class's constructor gives those config entries, where a preset's config
      does not set them. Declared, not read off the class: counting tokens then imports nothing (the
      class is diffusers': importing it costs 5 s of CPU, most of `ckpt-sweep import --docs`);
      test_families checks each against the class.
    """

    spatial: int = 8
    temporal: int = 4
    patch: int | str = 1
    patch_t: int | str = 1
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def patches(self, config: Mapping) -> tuple[int, int]:
        """(temporal, spatial) patch sizes under a preset's config (its constructor overrides)."""
        config = {**self.defaults, **config}

        def read(size):
            return config[size] if isinstance(size, str) else size

        patch = read(self.patch)
        if isinstance(patch, (tuple, list)):
            return int(patch[0]), int(patch[-1])
        return int(read(self.patch_t)), int(patch)

    def tokens(self, config: Mapping, shape: FamilyShape) -> int:
        patch_t, patch = self.patches(config)
        frames = 1 if shape.frames is None else ((shape.frames - 1) // self.temporal + 1) // patch_t
        return frames * (shape.height // self.spatial // patch) * (shape.width // self.spatial // patch)
