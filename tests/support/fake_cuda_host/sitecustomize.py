"""Makes every Python process started with this folder on PYTHONPATH and CKPT_SWEEP_FAKE_CUDA set
a CUDA host: NVML (tests/support/fake_nvml.py) and torch's C entry points
(tests/support/fake_cuda.py) describe one card; children forked from such a process inherit it.

CKPT_SWEEP_FAKE_CUDA is a card (`h100`, `h200`), optionally followed by `+kernels-on-cpu`: tensors
asked for on `cuda` are then made on the CPU, so a sweep with device=cuda runs its steps.

NVML is faked at once. torch's entry points are faked the moment torch's own import has finished,
before any line of the process can ask CUDA anything, as when torch was imported here first: a
process that never imports torch (multiprocessing's resource tracker, the acceptance script's
driver) is not made to (1 to 2 s each on two cores).
"""

import importlib.abc
import importlib.util
import os
import sys


def _fake_cuda(card, extra: str) -> None:
    from tests.support import fake_cuda

    fake_cuda.FakeCuda([card], rss_peaks=True).install()
    if extra == "kernels-on-cpu":
        fake_cuda.enter_kernels_on_cpu()


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds torch as the other finders do, and runs `then` when its module has executed."""

    def __init__(self, then):
        self.then = then

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            self.then()

        spec.loader.exec_module = exec_module
        return spec


_setting = os.environ.get("CKPT_SWEEP_FAKE_CUDA")
if _setting:
    from tests.support import fake_gpus, fake_nvml

    _card, _, _extra = _setting.partition("+")
    _gpu = {"h100": fake_gpus.H100, "h200": fake_gpus.H200}[_card]
    fake_nvml.install([fake_nvml.from_fake_gpu(_gpu)])
    if "torch" in sys.modules:
        _fake_cuda(_gpu, _extra)
    else:
        sys.meta_path.insert(0, _AfterTorch(lambda: _fake_cuda(_gpu, _extra)))
