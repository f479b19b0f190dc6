"""Makes every Python process started with this folder on PYTHONPATH and CKPT_SWEEP_FAKE_CUDA set
a CUDA host: NVML (tests/support/fake_nvml.py) and torch's C entry points
(tests/support/fake_cuda.py) describe one card; children forked from such a process inherit it.

CKPT_SWEEP_FAKE_CUDA is a card (`h100`, `h200`), optionally followed by `+kernels-on-cpu`: tensors
asked for on `cuda` are then made on the CPU, so a sweep with device=cuda runs its steps.
"""

import os

_setting = os.environ.get("CKPT_SWEEP_FAKE_CUDA")
if _setting:
    from tests.support import fake_cuda, fake_nvml

    _card, _, _extra = _setting.partition("+")
    _gpu = {"h100": fake_cuda.H100, "h200": fake_cuda.H200}[_card]
    fake_nvml.install([fake_nvml.from_fake_gpu(_gpu)])
    fake_cuda.FakeCuda([_gpu], rss_peaks=True).install()
    if _extra == "kernels-on-cpu":
        fake_cuda.enter_kernels_on_cpu()
