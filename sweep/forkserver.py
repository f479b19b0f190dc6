"""The fork server's first preload module: installs the CUDA guard for everything preloaded after
it (see NOTE [ CUDA and the fork server ] in sweep/cuda_guard.py). Imported nowhere else."""

from .cuda_guard import install

install()
