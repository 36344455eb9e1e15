"""The client SDK's worker at the issue's size (make test-faults): 5,000 operations over 3
accounts, one capped, each committed exactly once within the cap, on both backends (the
suite runs the same test with 600 in tests/e2e/test_client_sdk.py)."""

import pytest

from tests.e2e.test_client_sdk import client, committed_once_within_the_cap, server

__all__ = ["client", "server"]


@pytest.mark.faults
async def test_worker__5000_operations_committed_once_each_within_the_cap(client):
    await committed_once_within_the_cap(client, 5_000, every=25)
