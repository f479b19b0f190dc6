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
