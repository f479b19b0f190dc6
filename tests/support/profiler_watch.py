"""A builder whose step records whether torch's profiler was on when it ran (tests/test_profile.py)."""

import torch

from ckptlib import synthetic

PRESETS = synthetic.PRESETS
STEPS: list[bool] = []  # per call of the step: was the profiler on


def build(preset="tiny", **kwargs):
    work = synthetic.build(preset, **kwargs)
    step = work.step

    def watched_step():
        STEPS.append(torch.autograd.profiler._is_profiler_enabled)
        return step()

    work.step = watched_step
    return work
