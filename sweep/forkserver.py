"""The fork server's first preload module: installs the CUDA guard for everything preloaded after
it (see NOTE [ CUDA and the fork server ] in sweep/cuda_guard.py) and keeps third-party chatter in
the run's log (sweep/quiet.py). Imported nowhere else."""

from . import cuda_guard, quiet

quiet.install()
cuda_guard.install()
