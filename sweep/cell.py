"""A cell: one point of the sweep (family x shape x mode x quantization x training), as plain data."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ckptlib import CheckpointConfig
from ckptlib.config import DEFAULT_OFFLOAD_STASH_DEPTH, DEFAULT_PIN_MEMORY_MAX_BUCKETS

LATER_FIELDS = {
    "dtype": "auto",
    "offload_stash_depth": DEFAULT_OFFLOAD_STASH_DEPTH,
    "blocks": None,
    "attention": "auto",
    "compile": "none",
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def identity_key(identity: dict[str, Any]) -> str:
    """A short, stable hash of a canonical JSON rendering."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Cell:
    family: str
    builder: str  # import path of the family's build function
    preset: str
    mode: str  # the column label (docs' mode name)
    backend: str
    interval: int | None = None
    stride: int | None = None
    blocks: int | tuple[int, ...] | None = None  # which blocks the schedule may checkpoint (CheckpointConfig)
    offload_attention: bool = False
    pin_memory_max_buckets: int = DEFAULT_PIN_MEMORY_MAX_BUCKETS
    offload_stash_depth: int = DEFAULT_OFFLOAD_STASH_DEPTH
    quantization: str = "none"
    training: str = "lora"
    lora_rank: int = 16
    shape: dict[str, Any] = field(default_factory=dict)  # overrides of the preset's shape
    seed: int = 0
    dtype: str = "auto"  # auto: bf16 on accelerators, fp32 on CPU
    attention: str = "auto"  # the SDPA kernel (ckptlib.attention.BACKENDS)
    compile: str = "none"  # what torch.compile compiles (ckptlib.compile.COMPILE_MODES)

    @property
    def key(self) -> str:
        """Identity: a hash of the canonical config (the label `mode` is not part of it). Fields
        added after the first release are left out at their defaults, so older runs resume."""
        identity = {k: v for k, v in asdict(self).items() if k != "mode"}
        for name, default in LATER_FIELDS.items():
            if identity[name] == default:
                del identity[name]
        return identity_key(identity)

    def torch_dtype(self) -> torch.dtype | None:
        return None if self.dtype == "auto" else DTYPES[self.dtype]

    def checkpoint_config(self) -> CheckpointConfig:
        """Raises ValueError for a combination that is not a valid config (status `invalid`)."""
        return CheckpointConfig(
            backend=self.backend,
            interval=self.interval,
            stride=self.stride,
            blocks=self.blocks,
            offload_attention=self.offload_attention,
            pin_memory_max_buckets=self.pin_memory_max_buckets,
            offload_stash_depth=self.offload_stash_depth,
        )

    def describe(self) -> str:
        shape = "".join(f" {k}={v}" for k, v in sorted(self.shape.items()))
        return f"{self.family}/{self.preset}{shape} {self.mode} q={self.quantization} {self.training}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _word(value) -> str:
    """An enum field's word (typed configs hold enum members), or the value itself."""
    return getattr(value, "name", value)


def cell_from_config(cfg) -> Cell:
    """The cell a composed (typed) sweep config describes."""
    from omegaconf import OmegaConf

    schedule = {k: v for k, v in OmegaConf.to_container(cfg.mode).items() if k != "name"}
    if isinstance(schedule.get("blocks"), list):
        schedule["blocks"] = tuple(schedule["blocks"])
    return Cell(
        family=cfg.family.name,
        builder=cfg.family._target_,
        preset=str(cfg.preset),
        mode=cfg.mode.name,
        quantization=cfg.quantization.name,
        training=_word(cfg.training),
        dtype=_word(cfg.dtype),
        attention=_word(cfg.attention),
        compile=_word(cfg.compile),
        lora_rank=int(cfg.lora_rank),
        pin_memory_max_buckets=int(cfg.pin_memory_max_buckets),
        offload_stash_depth=int(cfg.offload_stash_depth),
        seed=int(cfg.seed),
        shape=OmegaConf.to_container(cfg.shape),
        **schedule,
    )
