import compileall
import gc
import os
import sys
from pathlib import Path

import pytest

# Collecting imports torch, diffusers' classes and peft: with the collector paused until the tests
# start (NOTE [ Imports without the collector ] in sweep/run/heap.py).
gc.disable()

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Three test workers share two cores, each with cells of its own: torch's OpenMP threads (one per
# core in every process) spin against each other's. One thread per process, set before torch is
# imported here and inherited by every sweep, fork server and cell a test starts: the families'
# gradient tests take 34 s instead of 144 s. A test about threads sets its own (test_planner.py).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Inductor's CPU kernels as plain C++ loops, not AVX vector code: each kernel's g++ compile is cheaper
# (a cold Flux.1 regional compile in this suite 86 s -> 70 s on 2 cores), and what the compile tests
# check (gradients against eager, the plan's counters) does not depend on the kernels' vector width.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")
# The test builders (tests/support) are importable in this process, its fork server and its cells,
# as a user's own builder is from the folder they run in.
SUPPORT = str(Path(__file__).resolve().parent / "support")
sys.path.insert(0, SUPPORT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (SUPPORT, os.environ.get("PYTHONPATH")) if p)


LAYERS = ("ckptlib", "sweep", "scale")


@pytest.fixture(scope="session", autouse=True)
def imported_modules_frozen():
    """What every in-process test imports (torch, peft, diffusers' classes) is never garbage: frozen,
    the collector's full passes skip it (the families' and predictor's tests: 63 s -> 56 s in one
    process), as each cell freezes the heap its fork server preloaded. Thawed at the end: a frozen
    object is never collected, and at exit Triton's bindings (nanobind) list each of theirs still
    alive, some 90 lines of "nanobind: leaked ..." under pytest's summary."""
    from sweep.run.heap import collector_paused

    with collector_paused():
        import peft  # noqa: F401
        import torch  # noqa: F401

        import ckptlib.families.classes  # noqa: F401
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session", autouse=True)
def fork_server_for_every_family():
    """The sweeps a test worker runs in process share its fork server (started at the first cell):
    it preloads what every family's cells need, as `ckpt-sweep run sweep=families` does, whichever
    sweep comes first."""
    from sweep.run import isolation

    isolation.fork_server("ckptlib.families.builders")


def pytest_configure(config):
    """The project's own modules compiled to bytecode once, before any worker starts: the suite starts
    some 300 interpreters (sweeps, fork servers, cells' probes, SLURM tasks, Ray workers), and under
    PYTHONDONTWRITEBYTECODE (set in some CI images) none writes what it compiles, so each compiled
    the project's sources anew (0.05 CPU-s for a `ckpt-sweep run`'s 59 modules). An edited source
    is newer than its bytecode, which is then not used."""
    if hasattr(config, "workerinput"):
        return
    root = Path(__file__).resolve().parents[1]
    for package in ("ckptlib", "sweep", "tests/support"):
        compileall.compile_dir(root / package, quiet=1)


def pytest_sessionstart(session):
    """An xdist controller collects nothing: it collects garbage from the start."""
    if session.config.getoption("dist", "no") != "no" and not hasattr(session.config, "workerinput"):
        gc.enable()


def pytest_collection_finish(session):
    gc.enable()


def pytest_collection_modifyitems(items):
    """Each test is marked with its layer, the folder it lives in; the `long` tests run first (under
    pyproject's --dist loadgroup each worker takes the next test as it frees up), so that no worker
    ends the suite alone on one of them while the others wait."""
    for item in items:
        layer = Path(str(item.fspath)).parent.name
        if layer in LAYERS:
            item.add_marker(getattr(pytest.mark, layer))
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: file order otherwise


@pytest.fixture
def postgres_url():
    """A fresh database on the test server, dropped afterwards (skips with the reason where there is no server)."""
    from tests.support.postgres import create_database, drop_database, postgres_reason

    reason = postgres_reason()
    if reason:
        pytest.skip(reason)
    name, url = create_database()
    yield url
    drop_database(name)


@pytest.fixture
def fake_cuda(monkeypatch):
    """One H100 at torch's C boundary (tests/support/fake_cuda.py); torch.cuda's Python code is real.
    Dynamo is imported first, on this CPU host: its import-time choices would outlive the fake."""
    import torch._dynamo  # noqa: F401

    from tests.support.fake_cuda import FakeCuda

    return FakeCuda().install(monkeypatch)
