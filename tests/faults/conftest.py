"""Every server process a fault test started is killed when the test ends, pass or fail."""

from collections.abc import Iterator

import pytest

from tests.faults.harness import kill_started


@pytest.fixture(autouse=True)
def no_server_left() -> Iterator[None]:
    yield
    kill_started()
