"""A builder that ignores the device it is asked for and builds the tiny synthetic model on the CPU:
the measure scenario's CUDA branch runs on a CPU host with torch.cuda stood in for (tests/test_measure.py)."""

from ckptlib import synthetic

PRESETS = synthetic.PRESETS


def build(preset="tiny", device="cpu", **kwargs):
    return synthetic.build(preset, device="cpu", **kwargs)
