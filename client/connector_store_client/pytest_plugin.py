"""A pytest fixture for handler authors: ``connector_store_server``, a ``LocalServer`` (a real
server on a temporary SQLite file) for one test. Load it with ``-p
connector_store_client.pytest_plugin``, ``pytest_plugins`` in the root ``conftest.py``, or by
importing the fixture into the test module."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from connector_store_client.testing import LocalServer


@pytest.fixture
def connector_store_server(tmp_path: Path) -> Iterator[LocalServer]:
    """A server of this test's own (stopped when it ends): ``.url``, ``.token``,
    ``.client()``."""
    with LocalServer(tmp_path / "connector-store") as server:
        yield server
