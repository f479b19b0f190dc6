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


# The suite runs on two workers (pytest-xdist, pyproject's addopts). Tests of the PostgreSQL server
# share one worker: one of them restarts the server, which must not cut another's connection.
SERVER_FIXTURES = {"postgres_url", "pod_run", "time_limited"}


def pytest_collection_modifyitems(items):
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("postgres-server"))
