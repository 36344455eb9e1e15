from tests.factories import claimed_operation, committed_operation


async def test_smoke(store):
    record = await claimed_operation(store)
    assert record.state == "attempted"
    done = await committed_operation(store, operation_id="op-2")
    assert done.state == "committed"
    assert await store.operations.has_newer_operation_on_document("did:key:caller", "op-1")
