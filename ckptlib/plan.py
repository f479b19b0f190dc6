"""The resolved schedule: which blocks run as one checkpointed region, which run plain."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .config import CheckpointConfig


@dataclass(frozen=True)
class BlockPlan:
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


def plan_blocks(num_blocks: int, config: CheckpointConfig) -> BlockPlan:
    """Regions start every `stride` blocks and span `interval` blocks (both default to 1), or with
    `regions="blocks"` are the single blocks that pattern picks (`"each"`: every block); cut to the
    blocks `config.blocks` chooses."""
    return plan_lists({"blocks": num_blocks}, config)["blocks"]


def plan_lists(sizes: Mapping[str, int], config: CheckpointConfig) -> dict[str, BlockPlan]:
    """Each block list's plan; `config.blocks` counts blocks through the lists in this order."""
    if any(size < 0 for size in sizes.values()):
        raise ValueError(f"block counts must be 0 or more, got {dict(sizes)}")
    chosen = config.chosen(sum(sizes.values())) if config.checkpoints else frozenset()
    plans, first = {}, 0
    for path, size in sizes.items():
        plans[path] = _plan_list(size, config, {i - first for i in chosen if first <= i < first + size})
        first += size
    return plans


def _plan_list(num_blocks: int, config: CheckpointConfig, chosen: set[int]) -> BlockPlan:
    interval = config.interval or 1
    stride = config.stride or interval
    regions = []
    if config.regions != "segments":  # single blocks: those the pattern picks
        regions = [range(i, i + 1) for i in sorted(chosen) if _picked(i, config)]
    else:
        for start in range(0, num_blocks, stride):
            regions += _runs([i for i in range(start, min(start + interval, num_blocks)) if i in chosen])
    covered = {i for r in regions for i in r}
    return BlockPlan(num_blocks, tuple(regions), tuple(i for i in range(num_blocks) if i not in covered))


def _picked(index: int, config: CheckpointConfig) -> bool:
    """Whether the per-block pattern checkpoints block `index` of its list (SimpleTuner's
    should_checkpoint_block: every block without an interval, every interval-th without a stride,
    else the first `interval` of every `stride`; with regions "each", every block whatever the interval)."""
    interval = config.interval or 1
    if interval == 1 or config.regions == "each":
        return True
    return index % interval == 0 if config.stride is None else index % config.stride < interval


def describe_blocks(blocks: int | Sequence[int] | None) -> str:
    """`config.blocks` in words: 'first 12 blocks', 'blocks 0, 5', 'every block'."""
    if blocks is None:
        return "every block"
    if isinstance(blocks, int):
        return f"first {blocks} blocks"
    return f"blocks {', '.join(map(str, blocks))}"


def _runs(indices: list[int]) -> list[range]:
    """Consecutive indices as ranges: [0, 1, 3] -> [range(0, 2), range(3, 4)]."""
    runs: list[range] = []
    for i in indices:
        if runs and runs[-1].stop == i:
            runs[-1] = range(runs[-1].start, i + 1)
        else:
            runs.append(range(i, i + 1))
    return runs
