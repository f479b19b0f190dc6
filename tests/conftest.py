import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def postgres_url():
    """A fresh database on the test server, dropped afterwards (skips with the reason where there is no server)."""
    from tests.postgres_helpers import create_database, drop_database, postgres_reason

    reason = postgres_reason()
    if reason:
        pytest.skip(reason)
    name, url = create_database()
    yield url
    drop_database(name)


# The suite runs on pytest-xdist workers (pyproject's addopts). The tests of one shared cluster run on
# one worker, one after another: the one-host SLURM (two GPUs, two CPUs) and the standalone Ray head.
# PostgreSQL tests need no such care: each has its own database, and the restart test its own server.
GROUPS = {"slurm_env": "slurm-cluster", "ray_head": "ray-head"}


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture in getattr(item, "fixturenames", ()):
            if fixture in GROUPS:
                item.add_marker(pytest.mark.xdist_group(GROUPS[fixture]))
                break
