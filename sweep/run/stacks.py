"""Where a cell's child was when it died without a result: its Python stack, dumped by faulthandler.

NOTE [ Where a cell died ]: a child that dies by a signal (a segfault in a kernel, an abort in a C++
library) or is stopped at its time limit sends no result, and its exit code says only how it ended.
So each child has faulthandler write its stack into a file of its own (StackFile, which has no name:
a parent killed outright leaves nothing behind): on a fatal signal (the faulting thread, from the
signal handler, which needs no working interpreter) and on SIGTERM (every thread; then the default
action ends it). The parent stops a child at its time limit with SIGTERM and kills it only if it
outlives TERMINATE_GRACE_S; it records the dump as the cell's traceback and the innermost frame in
the reason. A child killed outright (SIGKILL: the host's OOM killer, a lost worker) writes nothing,
and its reason stays how it ended. A sweep interrupted while a cell runs (Ctrl-C, SIGTERM) records
nothing of that cell, but stops its child the same way, and the line the sweep ends with says where
it was (isolation.interrupted_in): a sweep that seemed stuck says where. An acceptance check's
process does the same into its log (sweep/acceptance: a check that hangs on its first GPU says where).
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import sysconfig
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TextIO

TERMINATE_GRACE_S = 10.0  # a child at its time limit has this long to write its stack and end
_HEADER = re.compile(r"^(?P<name>.*) \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<function>.+)$')
_CURRENT = ("Current thread", "Stack")  # the dumping thread: all threads dumped, or only it
_STANDARD_LIBRARY = sysconfig.get_paths()["stdlib"] + os.sep


class StackFile:
    """An anonymous file (no name from the start: a parent killed outright leaves nothing behind)
    that one child writes its stack into. The child gets its descriptor as it gets its result pipe:
    a Connection, which multiprocessing hands to the fork server with the child's arguments."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()
        self.for_child: Connection | None = Connection(os.dup(self._file.fileno()), readable=False)

    def handed_over(self) -> None:
        """The child has its descriptor: this process's copy of it is closed."""
        if self.for_child is not None:
            self.for_child.close()
            self.for_child = None

    def dumped(self) -> str | None:
        """What the child dumped (less the list of extension modules a fatal error adds: a hundred
        names, none of which says where), None when it dumped nothing."""
        self._file.seek(0)
        lines = self._file.read().decode(errors="replace").splitlines()
        return "\n".join(line for line in lines if not line.startswith("Extension modules:")).strip() or None

    def __enter__(self) -> StackFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self.handed_over()
        self._file.close()


def dump_stack_on_death(file: TextIO | Connection) -> None:
    """This process's stack goes to `file` on a fatal signal or SIGTERM, which then end it as before
    (NOTE [ Where a cell died ]); faulthandler holds `file` (its descriptor open) until the process ends."""
    faulthandler.enable(file=file, all_threads=False)
    faulthandler.register(signal.SIGTERM, file=file, all_threads=True, chain=True)


def innermost_frame(dump: str) -> str | None:
    """'support/faulty.py line 30 (__call__)': the innermost frame outside Python's own library (a
    segfault in ctypes or a wait in threading says more by its caller) of the dumping thread, or,
    where that thread ran no Python (a library's own thread took the signal), of the last thread
    listed (the main thread, which faulthandler lists last)."""
    threads: list[tuple[str, list[re.Match]]] = []
    for line in dump.splitlines():
        if header := _HEADER.match(line):
            threads.append((header["name"], []))
        elif (frame := _FRAME.match(line)) and threads:
            threads[-1][1].append(frame)
    with_frames = [(name, frames) for name, frames in threads if frames]
    if not with_frames:
        return None
    current = [frames for name, frames in with_frames if name.startswith(_CURRENT)]
    frames = current[0] if current else with_frames[-1][1]
    frame = next((frame for frame in frames if not _in_standard_library(frame["path"])), frames[0])
    where = "/".join(Path(frame["path"]).parts[-2:])
    return f"{where} line {frame['line']} ({frame['function']})"


def _in_standard_library(path: str) -> bool:
    return path.startswith(_STANDARD_LIBRARY) and not any(part in path for part in ("site-packages", "dist-packages"))
