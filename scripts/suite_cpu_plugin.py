"""pytest plugin of scripts/suite_cpu.py: names the running test in the environment every process it
starts inherits (`TEST_VARIABLE`), and appends each test's own CPU time in the worker, one JSON line
a test, to the file `LOG_VARIABLE` names."""

import json
import os
import time

import pytest

TEST_VARIABLE = "CKPT_SUITE_CPU_TEST"
LOG_VARIABLE = "CKPT_SUITE_CPU_LOG"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    os.environ[TEST_VARIABLE] = item.nodeid
    before = time.process_time()
    yield
    spent = time.process_time() - before
    os.environ[TEST_VARIABLE] = ""
    with open(os.environ[LOG_VARIABLE], "a") as log:
        log.write(json.dumps({"test": item.nodeid, "cpu_s": spent}) + "\n")
