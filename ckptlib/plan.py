"""The resolved schedule: which blocks run as one checkpointed region, which run plain."""

from __future__ import annotations

from dataclasses import dataclass

from .config import CheckpointConfig


@dataclass(frozen=True)
class Plan:
    num_blocks: int
    regions: tuple[range, ...]  # each a run of consecutive blocks checkpointed as one
    plain: tuple[int, ...]  # blocks that keep their activations

    @property
    def checkpointed_blocks(self) -> tuple[int, ...]:
        return tuple(i for r in self.regions for i in r)

    def __str__(self) -> str:
        regions = " ".join(f"[{r.start}-{r.stop - 1}]" if len(r) > 1 else f"[{r.start}]" for r in self.regions)
        plain = ", ".join(map(str, self.plain))
        return f"{self.num_blocks} blocks: regions {regions or '(none)'}; plain {plain or '(none)'}"


def plan(num_blocks: int, config: CheckpointConfig) -> Plan:
    """Regions start every `stride` blocks and span `interval` blocks (both default to 1)."""
    if num_blocks < 0:
        raise ValueError(f"num_blocks must be 0 or more, got {num_blocks}")
    if not config.checkpoints:
        return Plan(num_blocks, (), tuple(range(num_blocks)))
    interval = config.interval or 1
    stride = config.stride or interval
    regions = tuple(range(start, min(start + interval, num_blocks)) for start in range(0, num_blocks, stride))
    covered = {i for r in regions for i in r}
    return Plan(num_blocks, regions, tuple(i for i in range(num_blocks) if i not in covered))
