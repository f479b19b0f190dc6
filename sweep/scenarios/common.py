"""What both scenarios share: a cell's config, its builder, and every outcome mapped to a status."""
from __future__ import annotations

from collections.abc import Callable

from ckptlib import UnsupportedModeError

from ..builders import import_builder
from ..cell import Cell
from ..outcome import classify
from ..results import CellResult
from ..status import Status
from .devices import CpuDevice


def run_scenario(cell: dict, scenario: Callable, device=None) -> CellResult:
    """`scenario(spec, config, build)` with every outcome a status: invalid configs, unsupported
    modes, out-of-memory (device or host) and failures."""
    spec = Cell(**cell)
    try:
        config = spec.checkpoint_config()
    except ValueError as error:
        return CellResult(Status.INVALID, str(error))
    try:
        return scenario(spec, config, import_builder(spec.builder))
    except UnsupportedModeError as error:
        return CellResult(Status.UNSUPPORTED, str(error))
    except Exception as error:  # noqa: BLE001 - every failure becomes a status
        return classify(error, device or CpuDevice())


def build_kwargs(spec: Cell) -> dict:
    """The keyword arguments every builder takes (see README: your own model)."""
    return dict(preset=spec.preset, training=spec.training, lora_rank=spec.lora_rank, seed=spec.seed,
                quantization=spec.quantization, dtype=spec.torch_dtype(), **spec.shape)
