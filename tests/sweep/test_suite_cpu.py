"""scripts/suite_cpu.py, the suite's CPU accounting: each process counted as what it is (a forked
process carries its parent's command line, so what forked it decides), and the busy cores of each
tenth of the run, where an idle tail would show."""

import importlib
import sys

import pytest

from tests.support.sweeps import ROOT

WORKER = "/venv/bin/python3 -u -c import sys;exec(eval(sys.stdin.readline())) "
SERVER = "/venv/bin/python3 -B -c from multiprocessing.forkserver import main; main(8, 9, ['sweep.run.forkserver'])"
DRIVER = "/venv/bin/python3 -m sweep.cli run sweep=none family=faulty"
PYTEST = "/venv/bin/python3 /venv/bin/pytest"


@pytest.fixture(scope="module")
def suite_cpu():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        yield importlib.import_module("suite_cpu")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


@pytest.mark.parametrize(
    "command, parent, kind",
    [
        (WORKER, PYTEST, "test workers"),
        (WORKER, WORKER, "test workers' forks (process pools)"),
        (SERVER, WORKER, "test workers' fork servers"),
        (SERVER, DRIVER, "fork servers"),
        (SERVER, SERVER, "cells"),
        (DRIVER, WORKER, "`ckpt-sweep run`"),
        ("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet -I x.cpp", SERVER, "g++ (Inductor)"),
        ("/usr/bin/sleep 1", WORKER, "other"),
    ],
)
def test_a_process_is_counted_as_what_its_command_line_and_its_parents_make_it(suite_cpu, command, parent, kind):
    assert suite_cpu.kind(command, parent) == kind


def test_the_busy_cores_of_each_tenth_show_an_idle_tail_and_a_tenth_without_samples(suite_cpu, capsys):
    started, wall = 1000.0, 100.0
    busy = [(started + t + 0.5, 2.0 if t < 80 else 0.5) for t in range(100) if not 40 <= t < 50]
    suite_cpu.print_busy(busy, started, wall)
    means = capsys.readouterr().out.split("): ")[1].split()
    assert means == ["2.00", "2.00", "2.00", "2.00", "-", "2.00", "2.00", "2.00", "0.50", "0.50"]
