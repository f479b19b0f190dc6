"""What both scenarios share: a cell's config, its builder, and every outcome mapped to a status."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ckptlib import UnsupportedModeError
from sweep.config.builders import BuilderError, describe_shape, import_builder
from sweep.config.cell import Cell
from sweep.run.classify import classify
from sweep.store.results import CellResult
from sweep.vocabulary import Status


def run_scenario(fields: dict, scenario: Callable, device_name: str = "cpu") -> CellResult:
    """`scenario(cell, config, build, device)` with every outcome a status: invalid configs,
    unsupported modes, out-of-memory (device or host) and failures, setting up the device included.
    The result tells the cell's shape facts too: the child has the model's classes imported, which
    the sweep's own process then need not (5 s of diffusers imports for the families)."""
    cell = Cell(**fields)
    result = _outcome(cell, scenario, device_name)
    with contextlib.suppress(BuilderError):
        result.shape = describe_shape(import_builder(cell.builder), cell.preset, cell.shape)
    return result


def _outcome(cell: Cell, scenario: Callable, device_name: str) -> CellResult:
    # torch is the cell's to import (NOTE [ A sweep's own process imports no torch ] in sweep/run/app.py)
    from .devices import CpuDevice, device_for

    try:
        config = cell.checkpoint_config()
    except ValueError as error:
        return CellResult(Status.INVALID, str(error))
    device = CpuDevice()
    try:
        device = device_for(device_name)
        return scenario(cell, config, import_builder(cell.builder), device)
    except UnsupportedModeError as error:
        return CellResult(Status.UNSUPPORTED, str(error))
    except Exception as error:  # noqa: BLE001 - every failure becomes a status
        return classify(error, device)


def build_kwargs(cell: Cell) -> dict:
    """The keyword arguments every builder takes (see README: your own model)."""
    return dict(
        preset=cell.preset,
        training=cell.training,
        lora_rank=cell.lora_rank,
        seed=cell.seed,
        quantization=cell.quantization,
        dtype=cell.torch_dtype(),
        **cell.shape,
    )
