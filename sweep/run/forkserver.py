"""The fork server's one preload module: it installs the CUDA guard (see NOTE [ CUDA and the fork
server ] in sweep/run/cuda_guard.py), keeps third-party chatter in the run's log (sweep/run/quiet.py), has
the server die with the process that started it (isolation.die_with_parent; multiprocessing's own
check, its alive pipe, was seen to miss it), then imports the modules the cells need
(`isolation.PRELOAD_VARIABLE`). Imported nowhere else.

NOTE [ The fork server owns its preload ]: multiprocessing's fork server catches only ImportError
from a preload, and a package that catches the guard's ImportError and raises something else
(diffusers' lazy modules raise RuntimeError) ends the server: every later cell then fails with
"EOFError: unexpected EOF". So each module is imported here under a broad except. An import that
failed leaves half of itself behind (the modules it loaded before failing, some of them holding
the refusal), and Python cannot take an import back: removing those modules and importing them
again re-registers native types and custom ops (Triton aborts on it). So a failed preload makes
the server start again as a fresh process (`exec`, same pid and inherited sockets), without that
module: children fork from a server that never ran a failed import. What failed is in FAILED
(module -> why); a child imports it itself, after lifting the guard, when its cell needs it.
"""

import gc

gc.disable()  # for good: the server imports, then only forks (NOTE [ Imports without the collector ], heap.py)

import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from . import cuda_guard, quiet  # noqa: E402
from .isolation import PATH_VARIABLE, PRELOAD_VARIABLE, STARTER_VARIABLE, die_with_parent  # noqa: E402

FAILED_VARIABLE = "CKPT_SWEEP_PRELOAD_FAILED"  # what earlier starts of this server could not preload
FAILED: dict[str, str] = json.loads(os.environ.get(FAILED_VARIABLE) or "{}")


def _reason(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def preload(modules: list[str]) -> None:
    for module in modules:
        if module in FAILED:
            continue
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - the server must outlive any preload
            os.environ[FAILED_VARIABLE] = json.dumps({**FAILED, module: _reason(error)})
            sys.stdout.flush()
            sys.stderr.flush()
            os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


if os.environ.get(PATH_VARIABLE):
    sys.path[:] = os.environ[PATH_VARIABLE].split(os.pathsep)
die_with_parent()
if os.environ.get(STARTER_VARIABLE, str(os.getppid())) != str(os.getppid()):
    # The process that started the server ended before the line above (a sweep that had nothing to
    # run): no signal will come, and its preload would run for nobody, holding the sweep's output open.
    os._exit(0)
quiet.install()
cuda_guard.install()
preload([module for module in os.environ.get(PRELOAD_VARIABLE, "").split(",") if module])
