"""A module whose import asks CUDA for the current device and, like diffusers' lazy modules, turns
the fork server guard's ImportError into a RuntimeError. It loads a helper first, so a failed
import of it leaves something behind."""

import torch

from tests.support import loaded_before_failing  # noqa: F401

try:
    DEVICE = torch.cuda.current_device()
except ImportError as error:
    raise RuntimeError(f"Failed to import {__name__}: {error}") from error
