"""Ctrl-C and SIGTERM during a sweep: the running cell's child is killed (nothing of it is recorded:
each cell is written in one transaction, after it ended), the fork server is stopped, the progress
bar is put away, one line says what to do, and the process exits 130 (SIGINT) or 143 (SIGTERM)."""

from __future__ import annotations

import contextlib
import signal
import sys


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
    from . import progress
    from .isolation import stop_fork_server

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the clean-up
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    line = line or progress.interrupted()
    stop_fork_server()
    print(f"ckpt-sweep: {line}", file=sys.stderr, flush=True)
    sys.exit(128 + signum)
