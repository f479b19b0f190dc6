"""Run one cell in a fresh child process and map how the child ended to a status.

Children come from a fork server that has torch, ckptlib, the builder's module and (where cells
train LoRA) peft imported already, so a cell pays a fork, not an interpreter start. The fork server
never initialises CUDA (NOTE [ CUDA and the fork server ] in sweep/run/cuda_guard.py); each child sets its own
CUDA_VISIBLE_DEVICES and device order before anything can start CUDA. The parent blocks in `wait`
on the result pipe and the child's sentinel (no polling) and never raises for an outcome of the cell.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Collection
from multiprocessing.connection import Connection, wait

from ckptlib.names import TRAINING_MODES
from sweep.store.results import CellResult
from sweep.vocabulary import Status

from . import quiet, stacks
from .classify import TRACEBACK_CHARS, failure

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent exits
# The fork server imports sweep.run.forkserver only; it imports these, with CUDA guarded (NOTE [ The
# fork server owns its preload ] in sweep/run/forkserver.py).
# ckptlib loads its names on first use: the modules every measured cell runs are named here.
# The families' and synthetic's entries import no torch (the sweep reads them): what builds is named.
PRELOAD = [
    "torch",
    "torch._dynamo",  # an optimizer imports it when first made: 1.5 to 2 s of each training cell otherwise
    "ckptlib.wiring",
    "ckptlib.attention",
    "ckptlib.workload",
    "ckptlib.families",
    "ckptlib.families.materialize",
    "ckptlib.synthetic.model",
    "sweep.run.isolation",
    "sweep.run.scenarios",
    "sweep.run.scenarios.devices",
]
PRELOAD_VARIABLE = "CKPT_SWEEP_PRELOAD"  # how the list reaches the fork server
STARTER_VARIABLE = "CKPT_SWEEP_SERVER_STARTER"  # the pid of the process that starts the fork server
# The sweep's sys.path, for the fork server: Python 3.11's ignores the one multiprocessing hands it
# (3.12 applies it), so under PYTHONSAFEPATH a builder beside the command line was not found there.
PATH_VARIABLE = "CKPT_SWEEP_SYS_PATH"
# What a cell needs preloaded besides PRELOAD, by its builder's module and by how it trains: every
# diffusers class for the families (5 s of imports a child would otherwise pay per cell), and PEFT
# for LoRA (it imports transformers' modeling code: 3 to 5 s of CPU that a sweep training in full,
# or frozen, never uses; diffusers' classes import it themselves, so the families load it anyway).
# A cell whose needs the server lacks imports them itself.
PRELOAD_FOR_BUILDER = {"ckptlib.families.builders": ["ckptlib.families.classes"]}
PRELOAD_FOR_TRAINING = {"lora": ["peft"]}
_context = None
preload_failures: dict[str, str] = {}  # what the fork server could not preload (module -> why), once known
_interrupted_in: str | None = None  # where the cell running when the sweep was interrupted was


def preload_modules(builder_module: str, trainings: Collection[str] = TRAINING_MODES) -> list[str]:
    """What cells of this builder that train in these ways (not told: in any way) need imported
    before they fork."""
    for_training = [module for training in sorted(trainings) for module in PRELOAD_FOR_TRAINING.get(training, [])]
    return [*PRELOAD, builder_module, *PRELOAD_FOR_BUILDER.get(builder_module, []), *for_training]


def fork_server_needs(builder: str, training: str) -> tuple[str, tuple[str, ...]]:
    """What the fork server must preload for cells of this builder (its import path) that train so:
    the builder's module, and how they train."""
    return builder.rpartition(".")[0], (training,)


def fork_server(builder_module: str, trainings: Collection[str] = TRAINING_MODES):
    """The fork server, started on first use with what its first cells need preloaded."""
    global _context
    if _context is None:
        socket_folder_within_reach()
        _context = mp.get_context("forkserver")
        os.environ[PRELOAD_VARIABLE] = ",".join(preload_modules(builder_module, trainings))
        os.environ[STARTER_VARIABLE] = str(os.getpid())
        os.environ[PATH_VARIABLE] = os.pathsep.join(sys.path)
        _context.set_forkserver_preload(["sweep.run.forkserver"])
    return _context


# NOTE [ A socket under a long TMPDIR ]: the fork server listens on a Unix socket that multiprocessing
# makes at TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, and a socket's path has at most 107 bytes. A SLURM
# job's TMPDIR (a folder per job, deep in scratch) is often longer than the 71 that leaves: the sweep
# then could not start ("OSError: AF_UNIX path too long"). Python 3.14 falls back to the system's
# /tmp there (cpython#132124); before it, multiprocessing's folder is made there first, once.
SOCKET_PATH_MAX = 107  # sun_path (108 bytes on Linux) less its trailing NUL
SOCKET_SUFFIX = len("/pymp-XXXXXXXX/listener-XXXXXXXX")
SYSTEM_TEMP_FOLDERS = ("/tmp", "/var/tmp")


def socket_folder_within_reach() -> None:
    """Have multiprocessing make its folder (which holds the fork server's socket) in the system's
    temporary folder where TMPDIR is too long for a socket's path (NOTE [ A socket under a long TMPDIR ])."""
    import tempfile
    from multiprocessing import util

    if len(tempfile.gettempdir()) + SOCKET_SUFFIX <= SOCKET_PATH_MAX:
        return
    base = next((folder for folder in SYSTEM_TEMP_FOLDERS if os.access(folder, os.W_OK | os.X_OK)), None)
    if base is None:
        return  # nowhere shorter: multiprocessing says so itself
    before, tempfile.tempdir = tempfile.tempdir, base
    try:
        util.get_temp_dir()  # made now under `base`, kept for this process, removed at its exit
    finally:
        tempfile.tempdir = before


def start_fork_server(builder_module: str, trainings: Collection[str]) -> None:
    """Start the fork server now and return at once: its preload (torch, the builder's module,
    peft for LoRA: seconds) runs on another core while this process composes the sweep's jobs and
    opens its database. A sweep with nothing to run leaves it to die with this process."""
    from multiprocessing import forkserver

    fork_server(builder_module, trainings)
    forkserver.ensure_running()


def stop_fork_server() -> None:
    """End the fork server now (an interrupted sweep must not leave it behind)."""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()


def run_isolated(
    task, args: tuple, timeout_s: float, builder_module: str, on_phase=None, trainings: Collection[str] = TRAINING_MODES
) -> CellResult:
    """`task(*args)` in a child process; returns its CellResult, or one naming how the child ended
    (and where it was: NOTE [ Where a cell died ] in sweep/run/stacks.py). With `on_phase`, the task
    also gets `progress=` and the parent hears each phase it reports."""
    ctx = fork_server(builder_module, trainings)
    receiver, sender = ctx.Pipe(duplex=False)
    # The fork server's environment is that of the first cell's launcher process; a launcher (Ray)
    # may since have assigned this process another GPU.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    log = os.environ.get(quiet.LOG_ENV)  # this sweep's log: the fork server may have started for an earlier one
    started = time.perf_counter()
    with stacks.StackFile() as stack:
        child = ctx.Process(
            target=child_main,
            args=(sender, task, args, visible, log, on_phase is not None, stack.for_child),
            daemon=True,
        )
        try:
            start_child(child)  # an interrupt that came while the child was being made lands below, with it known
            sender.close()
            stack.handed_over()
            result = _await(child, receiver, timeout_s, on_phase)
        except BaseException as error:
            if not isinstance(error, Exception):  # an interrupt (Ctrl-C, SIGTERM): the child says where it was
                _stop_saying_where(child, stack)
            raise
        finally:  # an interrupt lands here too: the child never outlives its parent
            if child.is_alive():
                child.kill()
                child.join()
            receiver.close()
        if result.status in (Status.CRASHED, Status.TIMEOUT):
            say_where(result, stack)
    result.timings["wall_s"] = time.perf_counter() - started
    return result


def _stop_saying_where(child, stack: stacks.StackFile) -> None:
    """Stop the child of an interrupted sweep as a timed-out one is stopped, and keep where it was
    for the line the sweep ends with (it got the group's SIGTERM itself, or none: Ctrl-C is ignored
    in a child, and its parent decides)."""
    global _interrupted_in
    with interrupts_held():  # a second Ctrl-C must not cut the grace short
        if child.is_alive():
            stop(child)
    _interrupted_in = stacks.innermost_frame(stack.dumped() or "")


def interrupted_in() -> str | None:
    """Where the cell that an interrupt stopped was (its innermost frame), once: None where no cell
    ran or it left no stack. A later sweep of this process starts without it."""
    global _interrupted_in
    where, _interrupted_in = _interrupted_in, None
    return where


def say_where(result: CellResult, stack: stacks.StackFile) -> None:
    """The dead child's stack as the result's traceback, its innermost frame in the reason."""
    if (dump := stack.dumped()) is None:
        return
    result.traceback = dump[-TRACEBACK_CHARS:]
    if where := stacks.innermost_frame(dump):
        result.reason = f"{result.reason}, while in {where}"


def answered_with_torch(question, builder: str, training: str, runs_cells: bool = True):
    """`question()`, which imports torch, answered where that costs least: in this process where
    torch is imported already (a builder's own module imported it) or where no fork server is to
    start (`runs_cells` False: a launcher runs the cells elsewhere), else by a child of the fork
    server this process's cells need anyway (NOTE [ A sweep's own process imports no torch ] in
    sweep/run/app.py). `builder` and `training`: a cell's, for the server's preload."""
    if "torch" in sys.modules or not runs_cells:
        return question()
    return answer_in_child(question, *fork_server_needs(builder, training))


def answer_in_child(question, builder_module: str, trainings: Collection[str] = TRAINING_MODES, timeout_s: float = 300):
    """`question()` asked of a child of the fork server, which has torch imported: its (picklable)
    answer, or None where the child ended without one."""
    ctx = fork_server(builder_module, trainings)
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_answer, args=(sender, question), daemon=True)
    try:
        start_child(child)
        sender.close()
        return receiver.recv() if receiver.poll(timeout_s) else None
    except EOFError:
        return None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receiver.close()


def _answer(conn, question) -> None:
    from . import cuda_guard

    die_with_parent()
    cuda_guard.lift()
    try:
        conn.send(question())
    except Exception:  # noqa: BLE001 - no answer is an answer: the parent records None
        conn.send(None)
    conn.close()


def start_child(child) -> None:
    """`child.start()` with interrupts held, and without the parent's main script where it has no file."""
    with interrupts_held(), main_script_unread():
        child.start()


@contextlib.contextmanager
def main_script_unread():
    """NOTE [ A main script read from standard input ]: multiprocessing prepares each child of the
    fork server by running the parent's main script again, by its path (`__main__.__file__`), unless
    it ran as a module (`-m`). A script piped to `python -` has the path '<stdin>', which no child can
    open: every cell ended "child exited with code 1 before reporting". A cell's task lives in the
    sweep's own modules, never in the main script, so where that path is no file the child is made as
    for `python -c`, whose main has no path."""
    main = sys.modules["__main__"]
    path = getattr(main, "__file__", None)
    if path is None or getattr(main, "__spec__", None) is not None or os.path.exists(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


@contextlib.contextmanager
def interrupts_held():
    """SIGINT and SIGTERM wait, for this thread, while the block runs: a Ctrl-C inside
    `Process.start()` would leave a started child its parent cannot name."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _await(child, receiver, timeout_s: float, on_phase) -> CellResult:
    deadline = time.monotonic() + timeout_s
    while True:
        ready = wait([receiver, child.sentinel], timeout=max(0.0, deadline - time.monotonic()))
        message = None
        if receiver in ready or receiver.poll():
            try:
                message = receiver.recv()
            except EOFError:
                message = None
        if isinstance(message, tuple) and message[:1] == ("phase",):
            on_phase(message[1])
            continue
        if isinstance(message, tuple) and message[:1] == ("preload",):
            preload_failures.update(message[1])
            continue
        if message is not None:
            result = message
        elif not ready:
            stop(child)
            result = CellResult(Status.TIMEOUT, f"no result within {timeout_s:g} s; child stopped")
        else:
            child.join(timeout=5)
            result = CellResult(Status.CRASHED, exit_reason(child.exitcode))
        child.join(timeout=10)
        return result


def stop(child) -> None:
    """SIGTERM, which has the child dump its stack and end (NOTE [ Where a cell died ]); SIGKILL if
    it has not ended within the grace."""
    child.terminate()
    child.join(timeout=stacks.TERMINATE_GRACE_S)
    if child.is_alive():
        child.kill()


def exit_reason(code: int | None) -> str:
    if code is None:
        return "child did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (likely the host OOM killer)" if -code == signal.SIGKILL else ""
        return f"child died by {name}{hint} before reporting"
    return f"child exited with code {code} before reporting"


def die_with_parent() -> None:
    """Linux: this process is killed when its parent exits. The fork server sets it (its parent is
    the sweep's process, a Ray worker or a SLURM task) and so does each cell (its parent is the fork
    server): when the process that runs cells is killed outright, no cell goes on holding a GPU."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def preload_note() -> str | None:
    """One line on what the fork server could not preload (None when it preloaded everything)."""
    if not preload_failures:
        return None
    failed = "; ".join(f"{module} ({why})" for module, why in sorted(preload_failures.items()))
    return f"imported in the cell's own process, which the fork server could not preload: {failed}"


def child_main(
    conn,
    task,
    args: tuple,
    visible_devices: str | None,
    log: str | None = None,
    reports_phases: bool = False,
    stack: Connection | None = None,
) -> None:
    from . import cuda_guard

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what an interrupt means
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    if stack is not None:
        stacks.dump_stack_on_death(stack)
    cuda_guard.lift()
    # Before anything can start CUDA: this cell's GPUs, numbered in NVML's (PCI bus) order.
    if visible_devices is None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # NOTE [ Device order ] in sweep/machine/gpus.py
    if log is not None:
        quiet.log_to(log)
    # the preloaded heap is the fork server's: collections skip it (0.2 s each otherwise), and collect
    # again from here (the server imported without: NOTE [ Imports without the collector ] in heap.py)
    gc.freeze()
    gc.enable()
    started = time.perf_counter()
    try:
        cuda_guard.check_untouched()
        failed = getattr(
            sys.modules.get("sweep.run.forkserver"), "FAILED", {}
        )  # NOTE [ The fork server owns its preload ]
        if failed:
            conn.send(("preload", failed))
        result = task(*args, progress=lambda phase: conn.send(("phase", phase))) if reports_phases else task(*args)
    # a harness error, or a cell's own code ending its process (sys.exit), still reaches the database as a
    # status, with its traceback
    except (Exception, SystemExit) as error:  # noqa: BLE001
        result = failure(error)
    result.timings["child_s"] = time.perf_counter() - started
    conn.send(result)
    conn.close()
