"""Every end-to-end test runs real processes (a ``connector-store serve``, a worker, Node):
all are marked ``slow`` (``make test-fast`` leaves them out)."""

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.slow)
