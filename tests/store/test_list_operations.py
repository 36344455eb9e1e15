"""list_tracked_operations and has_newer_operation_on_document: filters, the
(created_at, caller_did, operation_id) order, keyset paging and chunked IN lists, on both
backends."""

import pytest

from store.database import IN_LIST_CHUNK
from store.errors import InvalidInput
from store.operations import OperationFilter
from tests.factories import (
    claimed_operation,
    committed_operation,
    recorded_operation,
    terminal_operation,
)

ALICE, BOB, CAROL, DAVE = (f"did:key:{name}" for name in ("alice", "bob", "carol", "dave"))


async def populate(store, clock):
    """Six operations; the first three share created_at and were claimed out of order.

    In listing order: alice/op-1, alice/op-2, bob/op-1 (all at t0), carol/op-3 (t0+10),
    alice/op-4 failed (t0+20), bob/op-5 committed (t0+30).
    """
    made = {}

    async def add(caller, operation_id, owner, connector, document, state="attempted"):
        overrides = {
            "caller_did": caller,
            "operation_id": operation_id,
            "owner_did": owner,
            "connector_name": connector,
            "document_id": document,
        }
        if state == "attempted":
            record = await claimed_operation(store, **overrides)
        else:
            record = await terminal_operation(store, state, **overrides)
        made[f"{caller.removeprefix('did:key:')}/{operation_id}"] = record

    await add(BOB, "op-1", CAROL, "calendar", "doc-1")
    await add(ALICE, "op-2", ALICE, "crm", "doc-2")
    await add(ALICE, "op-1", ALICE, "calendar", "doc-1")
    clock.advance(10)
    await add(CAROL, "op-3", BOB, "calendar", None)
    clock.advance(10)
    await add(ALICE, "op-4", DAVE, "crm", "doc-3", state="failed")
    clock.advance(10)
    await add(BOB, "op-5", BOB, "drive", "doc-2", state="committed")
    return made


def names(records):
    return [f"{r.caller_did.removeprefix('did:key:')}/{r.operation_id}" for r in records]


ALL = ["alice/op-1", "alice/op-2", "bob/op-1", "carol/op-3", "alice/op-4", "bob/op-5"]


async def test_list_tracked_operations__no_filter_all_in_order(store, clock):
    made = await populate(store, clock)

    listed = await store.operations.list_tracked_operations(OperationFilter())

    assert names(listed) == ALL
    assert listed == [made[name] for name in ALL]


async def test_list_tracked_operations__empty_store_empty(store):
    assert await store.operations.list_tracked_operations(OperationFilter()) == []


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        pytest.param(
            {"caller_did": ALICE}, ["alice/op-1", "alice/op-2", "alice/op-4"], id="caller"
        ),
        pytest.param({"caller_did": DAVE}, [], id="caller-none"),
        pytest.param({"operation_id": "op-1"}, ["alice/op-1", "bob/op-1"], id="operation-id"),
        pytest.param(
            {"caller_did": BOB, "operation_id": "op-1"}, ["bob/op-1"], id="caller-and-operation"
        ),
        pytest.param(
            {"visible_to": BOB},
            ["bob/op-1", "carol/op-3", "bob/op-5"],
            id="visible-caller-or-owner",
        ),
        pytest.param({"visible_to": CAROL}, ["bob/op-1", "carol/op-3"], id="visible-owner-only"),
        pytest.param({"visible_to": DAVE}, ["alice/op-4"], id="visible-owner-of-one"),
        pytest.param({"visible_to": "did:key:nobody"}, [], id="visible-none"),
        pytest.param({"connector_name": "crm"}, ["alice/op-2", "alice/op-4"], id="connector"),
        pytest.param({"states": ["failed"]}, ["alice/op-4"], id="states-one"),
        pytest.param(
            {"states": ["attempted", "committed"]},
            ["alice/op-1", "alice/op-2", "bob/op-1", "carol/op-3", "bob/op-5"],
            id="states-two",
        ),
        pytest.param({"states": ("superseded",)}, [], id="states-none-match"),
        pytest.param({"document_ids": ["doc-2"]}, ["alice/op-2", "bob/op-5"], id="documents-one"),
        pytest.param(
            {"document_ids": ["doc-3", "doc-1"]},
            ["alice/op-1", "bob/op-1", "alice/op-4"],
            id="documents-two",
        ),
        pytest.param({"document_ids": ["doc-missing"]}, [], id="documents-none-match"),
        pytest.param(
            {"caller_did": ALICE, "connector_name": "calendar"}, ["alice/op-1"], id="combined"
        ),
        pytest.param(
            {"visible_to": BOB, "states": ["committed"], "document_ids": ["doc-2"]},
            ["bob/op-5"],
            id="combined-visible-state-document",
        ),
        pytest.param({"states": []}, [], id="states-empty"),
        pytest.param({"document_ids": []}, [], id="documents-empty"),
        pytest.param({"caller_did": ALICE, "states": []}, [], id="states-empty-with-caller"),
        pytest.param({"visible_to": BOB, "document_ids": ()}, [], id="documents-empty-tuple"),
    ],
)
async def test_list_tracked_operations__filter(store, clock, where, expected):
    await populate(store, clock)

    listed = await store.operations.list_tracked_operations(OperationFilter(**where))

    assert names(listed) == expected


async def test_list_tracked_operations__node_key_filter(store, clock):
    made = await populate(store, clock)
    wanted = made["bob/op-1"]

    listed = await store.operations.list_tracked_operations(
        OperationFilter(node_key=wanted.node_key)
    )

    assert listed == [wanted]
    assert (
        await store.operations.list_tracked_operations(
            OperationFilter(node_key=wanted.node_key, caller_did=ALICE)
        )
        == []
    )
    assert await store.operations.list_tracked_operations(OperationFilter(node_key="nope")) == []


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ({"states": ["attempted", "done"]}, "states"),
        ({"states": ["ATTEMPTED"]}, "states"),
        ({"document_ids": ["doc-1", ""]}, "documentIDs[1]"),
        ({"document_ids": "doc-1"}, "documentIDs"),
    ],
)
async def test_list_tracked_operations__invalid_filter_refused(store, where, field):
    with pytest.raises(InvalidInput) as raised:
        await store.operations.list_tracked_operations(OperationFilter(**where))

    assert raised.value.field == field


async def page_through(store, where, size):
    """Every page of ``size`` rows, following the keyset from the last row of each."""
    pages = []
    after = None
    while True:
        page = await store.operations.list_tracked_operations(where, after=after, limit=size)
        if not page:
            return pages
        assert len(page) <= size
        pages.append(page)
        after = page[-1].order_key


@pytest.mark.parametrize("size", [1, 2, 4, 6, 10])
async def test_list_tracked_operations__keyset_pages_cover_all_in_order(store, clock, size):
    await populate(store, clock)

    pages = await page_through(store, OperationFilter(), size)

    assert [names(page) for page in pages] == [
        ALL[start : start + size] for start in range(0, len(ALL), size)
    ]


async def test_list_tracked_operations__after_tie_on_created_at_continues_by_caller_then_id(
    store, clock
):
    made = await populate(store, clock)

    after_alice = await store.operations.list_tracked_operations(
        OperationFilter(), after=made["alice/op-1"].order_key, limit=2
    )
    after_alice_2 = await store.operations.list_tracked_operations(
        OperationFilter(), after=made["alice/op-2"].order_key
    )

    assert names(after_alice) == ["alice/op-2", "bob/op-1"]
    assert names(after_alice_2) == ALL[2:]


async def test_list_tracked_operations__after_with_filter(store, clock):
    made = await populate(store, clock)

    listed = await store.operations.list_tracked_operations(
        OperationFilter(caller_did=ALICE), after=made["alice/op-2"].order_key
    )

    assert names(listed) == ["alice/op-4"]


async def test_list_tracked_operations__after_last_empty(store, clock):
    made = await populate(store, clock)

    assert (
        await store.operations.list_tracked_operations(
            OperationFilter(), after=made["bob/op-5"].order_key
        )
        == []
    )


async def test_list_tracked_operations__limit_zero_empty(store, clock):
    await populate(store, clock)

    assert await store.operations.list_tracked_operations(OperationFilter(), limit=0) == []


@pytest.mark.parametrize("limit", [-1, 1.5, True])
async def test_list_tracked_operations__invalid_limit_refused(store, limit):
    with pytest.raises(InvalidInput) as raised:
        await store.operations.list_tracked_operations(OperationFilter(), limit=limit)

    assert raised.value.field == "limit"


# --- more document ids than one IN list holds ------------------------------------------------

DOCUMENTS = [f"doc-{index:04d}" for index in range(1_200)]


async def populate_documents(store, clock):
    """Operations spread over the three 500-id chunks of ``DOCUMENTS``, the later chunks
    created first, with created_at ties across chunks; returns the expected listing."""
    plan = [
        # (ms after the previous, caller, operation id, document index)
        (0, "did:key:m", "op-a", 1_199),
        (0, "did:key:c", "op-b", 700),
        (0, "did:key:c", "op-a", 5),
        (7, "did:key:z", "op-c", 999),
        (3, "did:key:a", "op-d", 1_000),
        (0, "did:key:a", "op-e", 250),
        (0, "did:key:b", "op-f", 1_001),
        (11, "did:key:x", "op-g", 501),
        (5, "did:key:x", "op-h", 499),
        (0, "did:key:x", "op-i", 500),
        (0, "did:key:w", "op-j", 1_100),
        (2, "did:key:k", "op-k", 0),
    ]
    for advance, caller, operation_id, index in plan:
        clock.advance(advance)
        await claimed_operation(
            store, caller_did=caller, operation_id=operation_id, document_id=DOCUMENTS[index]
        )
    clock.advance(1)
    await claimed_operation(store, caller_did="did:key:a", operation_id="op-out", document_id="x")
    await claimed_operation(store, caller_did="did:key:a", operation_id="op-none", document_id=None)
    return [
        ("did:key:c", "op-a"),
        ("did:key:c", "op-b"),
        ("did:key:m", "op-a"),
        ("did:key:z", "op-c"),
        ("did:key:a", "op-d"),
        ("did:key:a", "op-e"),
        ("did:key:b", "op-f"),
        ("did:key:x", "op-g"),
        ("did:key:w", "op-j"),
        ("did:key:x", "op-h"),
        ("did:key:x", "op-i"),
        ("did:key:k", "op-k"),
    ]


def keys(records):
    return [(record.caller_did, record.operation_id) for record in records]


@pytest.mark.parametrize("order", ["ascending", "descending"])
async def test_list_tracked_operations__1200_document_ids_chunked_in_order(store, clock, order):
    expected = await populate_documents(store, clock)
    documents = DOCUMENTS if order == "ascending" else DOCUMENTS[::-1]

    listed = await store.operations.list_tracked_operations(OperationFilter(document_ids=documents))

    assert keys(listed) == expected
    assert [record.order_key for record in listed] == sorted(r.order_key for r in listed)


async def test_list_tracked_operations__1200_document_ids_queried_in_chunks(
    store, clock, monkeypatch
):
    expected = await populate_documents(store, clock)
    statements = []
    fetch_all = store.db.fetch_all

    async def counting_fetch_all(query):
        statements.append(query)
        return await fetch_all(query)

    monkeypatch.setattr(store.db, "fetch_all", counting_fetch_all)
    listed = await store.operations.list_tracked_operations(OperationFilter(document_ids=DOCUMENTS))

    assert keys(listed) == expected
    assert len(statements) == -(-len(DOCUMENTS) // IN_LIST_CHUNK) == 3


@pytest.mark.parametrize("size", [1, 3, 5, 12])
async def test_list_tracked_operations__1200_document_ids_keyset_pages(store, clock, size):
    expected = await populate_documents(store, clock)

    pages = await page_through(store, OperationFilter(document_ids=DOCUMENTS), size)

    assert [keys(page) for page in pages] == [
        expected[start : start + size] for start in range(0, len(expected), size)
    ]


async def test_list_tracked_operations__1200_document_ids_with_other_filters(store, clock):
    await populate_documents(store, clock)

    listed = await store.operations.list_tracked_operations(
        OperationFilter(document_ids=DOCUMENTS, caller_did="did:key:x", states=["attempted"])
    )

    assert keys(listed) == [("did:key:x", "op-g"), ("did:key:x", "op-h"), ("did:key:x", "op-i")]


# --- has_newer_operation_on_document ---------------------------------------------------------


async def test_has_newer_operation_on_document__later_created_newer(store, clock):
    await claimed_operation(store, operation_id="op-old", document_id="doc-1")
    clock.advance(1)
    await claimed_operation(store, caller_did=ALICE, operation_id="op-new", document_id="doc-1")

    assert await store.operations.has_newer_operation_on_document("did:key:caller", "op-old")
    assert not await store.operations.has_newer_operation_on_document(ALICE, "op-new")


async def test_has_newer_operation_on_document__created_at_tie_broken_by_caller(store):
    await claimed_operation(store, caller_did=BOB, operation_id="op-1", document_id="doc-1")
    await claimed_operation(store, caller_did=ALICE, operation_id="op-9", document_id="doc-1")

    assert await store.operations.has_newer_operation_on_document(ALICE, "op-9")
    assert not await store.operations.has_newer_operation_on_document(BOB, "op-1")


async def test_has_newer_operation_on_document__caller_tie_broken_by_operation_id(store):
    await claimed_operation(store, caller_did=ALICE, operation_id="op-2", document_id="doc-1")
    await claimed_operation(store, caller_did=ALICE, operation_id="op-1", document_id="doc-1")

    assert await store.operations.has_newer_operation_on_document(ALICE, "op-1")
    assert not await store.operations.has_newer_operation_on_document(ALICE, "op-2")


async def test_has_newer_operation_on_document__other_document_not_newer(store, clock):
    await claimed_operation(store, operation_id="op-1", document_id="doc-1")
    clock.advance(1)
    await claimed_operation(store, operation_id="op-2", document_id="doc-2")

    assert not await store.operations.has_newer_operation_on_document("did:key:caller", "op-1")


async def test_has_newer_operation_on_document__older_operation_not_newer(store, clock):
    await claimed_operation(store, operation_id="op-b", document_id="doc-1")
    clock.advance(1)
    await claimed_operation(store, operation_id="op-a", document_id="doc-1")

    assert not await store.operations.has_newer_operation_on_document("did:key:caller", "op-a")
    assert await store.operations.has_newer_operation_on_document("did:key:caller", "op-b")


async def test_has_newer_operation_on_document__only_operation_false(store):
    await claimed_operation(store, document_id="doc-1")

    assert not await store.operations.has_newer_operation_on_document("did:key:caller", "op-1")


async def test_has_newer_operation_on_document__null_document_false(store, clock):
    await claimed_operation(store, operation_id="op-1", document_id=None)
    clock.advance(1)
    await claimed_operation(store, operation_id="op-2", document_id=None)

    assert not await store.operations.has_newer_operation_on_document("did:key:caller", "op-1")


async def test_has_newer_operation_on_document__absent_operation_false(store):
    await claimed_operation(store, document_id="doc-1")

    assert not await store.operations.has_newer_operation_on_document("did:key:caller", "nope")


@pytest.mark.parametrize("state", ["committed", "failed", "superseded"])
async def test_has_newer_operation_on_document__terminal_newer_counts(store, clock, state):
    # The seed's predicate looks at the order only, not at the newer operation's state.
    await claimed_operation(store, operation_id="op-1", document_id="doc-1")
    clock.advance(1)
    await terminal_operation(
        store, state, operation_id="op-2", source_id="evt-2", document_id="doc-1"
    )

    assert await store.operations.has_newer_operation_on_document("did:key:caller", "op-1")


async def test_has_newer_operation_on_document__terminal_operation_itself_answers(store, clock):
    await committed_operation(store, operation_id="op-1", document_id="doc-1")
    await recorded_operation(store, "failed", operation_id="op-0", document_id="doc-1")

    assert not await store.operations.has_newer_operation_on_document("did:key:caller", "op-1")
    assert await store.operations.has_newer_operation_on_document("did:key:caller", "op-0")


async def test_list_tracked_operations__repeated_document_ids_across_chunks_listed_once(
    store, clock
):
    expected = await populate_documents(store, clock)
    # doc-0005, doc-0700 and doc-1199 named again in another 500-id chunk: a filter means
    # the same whether its list is split or not.
    documents = [*DOCUMENTS, "doc-0005", "doc-0700", "doc-1199"]
    short = ["doc-0005", "doc-0700", "doc-0005"]

    listed = await store.operations.list_tracked_operations(OperationFilter(document_ids=documents))
    listed_short = await store.operations.list_tracked_operations(
        OperationFilter(document_ids=short)
    )

    assert keys(listed) == expected
    assert keys(listed_short) == [("did:key:c", "op-a"), ("did:key:c", "op-b")]


async def test_list_tracked_operations__long_states_list_deduplicated(store):
    record = await claimed_operation(store)
    found = await store.operations.list_tracked_operations(
        OperationFilter(states=["attempted"] * 100_000)
    )
    assert found == [record]


@pytest.mark.parametrize(
    "after",
    [
        (1, 2, 3),
        ("x", "a", "b"),
        (2**70, "a", "b"),
        (1.5, "a", "b"),
        (True, "a", "b"),
        (1, "a\x00", "b"),
        (1, {"a": 1}, "b"),
    ],
)
async def test_list_tracked_operations__malformed_after_refused(store, after):
    with pytest.raises(InvalidInput) as refused:
        await store.operations.list_tracked_operations(OperationFilter(), after=after)
    assert refused.value.field == "after"


@pytest.mark.parametrize(
    "field", ["node_key", "caller_did", "operation_id", "connector_name", "visible_to"]
)
async def test_list_tracked_operations__filter_strings_checked(store, field):
    with pytest.raises(InvalidInput):
        await store.operations.list_tracked_operations(OperationFilter(**{field: "x" * 2000}))


async def test_list_tracked_operations__newest_first_is_the_order_reversed(store, clock):
    await populate(store, clock)

    listed = await store.operations.list_tracked_operations(OperationFilter(), newest_first=True)

    assert names(listed) == ALL[::-1]


@pytest.mark.parametrize("size", [1, 2, 4, 6, 10])
@pytest.mark.parametrize("newest_first", [False, True])
async def test_list_tracked_operations__pages_back_from_any_cursor_meet_the_pages_forward(
    store, clock, size, newest_first
):
    """A page read in the other order after a row's key holds the rows before it: read back
    from the end of each page, the pages of either order are the same rows."""
    await populate(store, clock)
    order = ALL[::-1] if newest_first else ALL
    forward = await store.operations.list_tracked_operations(
        OperationFilter(), newest_first=newest_first
    )

    for index, record in enumerate(forward):
        before = await store.operations.list_tracked_operations(
            OperationFilter(), after=record.order_key, limit=size, newest_first=not newest_first
        )
        assert names(before) == order[max(0, index - size) : index][::-1]


async def test_list_tracked_operations__newest_first_over_chunked_document_ids(store, clock):
    expected = await populate_documents(store, clock)

    listed = await store.operations.list_tracked_operations(
        OperationFilter(document_ids=DOCUMENTS), newest_first=True, limit=5
    )

    assert keys(listed) == expected[::-1][:5]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (OperationFilter(), 6),
        (OperationFilter(caller_did=ALICE), 3),
        (OperationFilter(visible_to=BOB), 3),
        (OperationFilter(states=["failed", "committed"]), 2),
        (OperationFilter(states=[]), 0),
        (OperationFilter(document_ids=["doc-1", "doc-2", "doc-1"]), 4),
        (OperationFilter(document_ids=[]), 0),
    ],
)
async def test_count_tracked_operations__counts_what_the_list_pages_through(
    store, clock, where, expected
):
    await populate(store, clock)

    counted = await store.operations.count_tracked_operations(where)
    listed = await store.operations.list_tracked_operations(where)

    assert counted == len(listed) == expected


async def test_count_tracked_operations__over_chunked_document_ids(store, clock):
    expected = await populate_documents(store, clock)

    counted = await store.operations.count_tracked_operations(
        OperationFilter(document_ids=DOCUMENTS + DOCUMENTS[:3])
    )

    assert counted == len(expected)


async def test_count_tracked_operations__bad_filter_names_the_field(store):
    with pytest.raises(InvalidInput) as raised:
        await store.operations.count_tracked_operations(OperationFilter(caller_did=""))

    assert raised.value.field == "callerDID"
