"""The fork server's first preload module: installs the CUDA guard for everything preloaded after
it (see NOTE [ CUDA and the fork server ] in sweep/cuda_guard.py), keeps third-party chatter in
the run's log (sweep/quiet.py), and has the server die with the process that started it
(isolation.die_with_parent; multiprocessing's own check, its alive pipe, was seen to miss it).
Imported nowhere else."""

from . import cuda_guard, quiet
from .isolation import die_with_parent

die_with_parent()
quiet.install()
cuda_guard.install()
