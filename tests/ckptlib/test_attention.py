"""The attention axis: the SDPA kernel asked for is the one that ran (checked by the ops it
dispatched), a kernel the device lacks is unsupported with the reason, and the numerics column is
0 for the reference itself and positive where the arithmetic differs (bf16, a fused kernel)."""

import pytest
import torch

import ckptlib
from ckptlib import CheckpointConfig, UnsupportedModeError, synthetic
from ckptlib.attention import attention_backend, numerics, refused_kernels, watching_backends
from ckptlib.families import build as build_family


def flux(dtype=torch.float32):
    return build_family("flux1", "tiny", dtype=dtype)


def kernels_that_ran(run, name: str) -> str:
    """The SDPA kernels `run` (a training step) took under backend `name`, watched as a cell's
    step is (sweep/run/scenarios/measure.py)."""
    with refused_kernels(name), attention_backend(name), watching_backends() as seen:
        run()
    return seen.text()


def test_the_kernel_that_ran_is_read_from_the_dispatched_ops():
    work = flux()
    assert kernels_that_ran(work.step, "math") == "math"
    assert kernels_that_ran(work.step, "flash") == "flash"  # CPU's fused kernel
    assert kernels_that_ran(work.step, "auto") in {"flash", "math"}
    assert kernels_that_ran(lambda: torch.ones(2) * 2, "auto") == "none"


def test_a_kernel_the_device_lacks_is_unsupported_with_the_reason():
    with pytest.raises(UnsupportedModeError, match="attention=efficient: no efficient SDPA kernel"):
        kernels_that_ran(flux().step, "efficient")
    with pytest.raises(ValueError, match="unknown attention backend 'fast'; valid: auto, math"):
        kernels_that_ran(flux().step, "fast")


def test_numerics_are_zero_for_the_reference_and_positive_where_arithmetic_differs():
    work = flux()
    before = [p.detach().clone() for p in work.model.parameters()]
    same = numerics(work, CheckpointConfig("none"), "math", ckptlib.apply)
    assert same.loss_rel_error == 0 and same.grad_rel_error == 0
    recomputed = numerics(work, CheckpointConfig("torch"), "math", ckptlib.apply)
    assert recomputed.grad_rel_error == 0  # recompute is bitwise (tests/ckptlib/test_apply.py)
    fused = numerics(work, CheckpointConfig("torch"), "flash", ckptlib.apply)
    assert 0 < fused.grad_rel_error < 1e-4
    assert all(torch.equal(a, b) for a, b in zip(before, work.model.parameters()))  # copies only
    bf16 = numerics(flux(torch.bfloat16), CheckpointConfig("none"), "math", ckptlib.apply)
    assert bf16.grad_rel_error > 1e-3 and bf16.loss_rel_error > 0


def test_dropout_draws_the_same_masks_in_both_steps():
    work = synthetic.build("tiny")  # dropout 0.1
    assert numerics(work, CheckpointConfig("torch"), "math", ckptlib.apply).grad_rel_error == 0
