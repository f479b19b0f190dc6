"""The words a harness configures ckptlib with, importable without torch: a sweep's configuration
is read and checked in a process that never needs torch (its cells run in children that do)."""

from __future__ import annotations

TRAINING_MODES = ("lora", "frozen", "full")

# The SDPA kernel a cell may force, by name -> the member of torch.nn.attention.SDPBackend
ATTENTION_KERNELS = {
    "math": "MATH",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
}
ATTENTION_BACKENDS = ("auto", *ATTENTION_KERNELS)  # auto: torch's own choice
