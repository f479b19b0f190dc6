"""How a sweep's processes treat Python's cyclic garbage collector while they import.

NOTE [ Imports without the collector ]: importing torch, torch._dynamo and diffusers' classes makes
about a million long-lived objects, and the collector, set off by allocations, runs its young
generations hundreds of times and its full pass several times over them meanwhile: a quarter of
the imports' CPU (torch, dynamo and the families' classes in one process: 6.2 -> 4.6 CPU-s). The
processes that start by importing them (the console script's sweep, the fork server) import with
the collector paused. The fork server never collects again (it only forks); each cell freezes what
the server imported (nothing preloaded is garbage: its collections skip it) and collects its own
garbage from its start (isolation.child_main); the console script collects again once its imports
are done. The server itself does not freeze: at its exit a frozen heap stays uncollected, and
Triton's nanobind prints every object of it as leaked (into the sweep's stderr).
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def collector_paused():
    """No cyclic collection inside; the collector as it was afterwards (nested uses are harmless)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
