"""What ``count_reissue`` says beside a concurrent ``reissueOperations``, on both backends: an
original another call reissued between the count's read of the originals and its sorting of
their keys is done, never blocked nor remaining."""

from store.operations import OperationFilter
from tests.leasing_factories import due_record, insert_operations

CONNECTOR = OperationFilter(connector_name="calendar")


async def test_count_reissue__a_peer_call_reissuing_meanwhile_is_not_blocked(store, monkeypatch):
    await insert_operations(
        store,
        [due_record(store, n, state="failed", last_kind="permanent") for n in range(4)],
    )
    sort = store.operator._sort_reissues
    peer: list = []

    async def reissued_meanwhile(items):
        if not peer:
            # A peer's call reissues every original between the read and the sorting.
            peer.append(None)
            peer[0] = await store.operator.reissue_operations(CONNECTOR, limit=10)
        return await sort(items)

    monkeypatch.setattr(store.operator, "_sort_reissues", reissued_meanwhile)
    left = await store.operator.count_reissue(CONNECTOR)

    assert len(peer[0]) == 4
    assert (left.blocked, left.remaining) == (0, 0)
