"""Ctrl-C and SIGTERM during a sweep: the running cell's child is stopped (nothing of it is recorded:
each cell is written in one transaction, after it ended; its stack says where it was, NOTE [ Where a
cell died ] in sweep/run/stacks.py), the fork server is stopped, the progress bar is put away, one
line says where the cell was and what to do, and the process exits 130 (SIGINT) or 143 (SIGTERM)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable


def not_started() -> str:
    return "interrupted before any cell ran; run the same command again to start"


# The one line an interrupted sweep ends with: the progress display of a running sweep replaces
# this with its own (sweep/run/progress.py), which knows how far the sweep got.
say_when_interrupted: Callable[[], str] = not_started


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is (like KeyboardInterrupt for SIGINT)."""


@contextlib.contextmanager
def handled(line: str | None = None):
    """`line`: what to say instead of the sweep's progress (a process that runs one job of it)."""

    def terminate(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    except KeyboardInterrupt:
        stop(signal.SIGINT, line)
    except Terminated:
        stop(signal.SIGTERM, line)
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop(signum: int, line: str | None = None) -> None:
    from .isolation import stop_fork_server

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    line = line or say_when_interrupted()
    stop_fork_server()
    print(f"ckpt-sweep: {line}", file=sys.stderr, flush=True)
    sys.exit(128 + signum)
