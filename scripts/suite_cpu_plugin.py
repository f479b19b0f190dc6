"""pytest plugin of scripts/suite_cpu.py: names the running test in the environment every process it
starts inherits (`TEST_VARIABLE`), and appends each test's own CPU time in the worker, with its worker
and when it started and ended, one JSON line a test, to the file `LOG_VARIABLE` names."""

import json
import os
import time

import pytest

TEST_VARIABLE = "CKPT_SUITE_CPU_TEST"
LOG_VARIABLE = "CKPT_SUITE_CPU_LOG"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    os.environ[TEST_VARIABLE] = item.nodeid
    before, started = time.process_time(), time.time()
    yield
    spent = time.process_time() - before
    os.environ[TEST_VARIABLE] = ""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    record = {"test": item.nodeid, "cpu_s": spent, "worker": worker, "start": started, "end": time.time()}
    with open(os.environ[LOG_VARIABLE], "a") as log:
        log.write(json.dumps(record) + "\n")
