"""``operationEvents`` and ``watchEvents`` over real WebSockets (graphql-transport-ws, the
``websockets`` client), on both backends: events in log order as they commit, a resume with
``after`` across a reconnect that loses and repeats nothing, a tenant's stream of its own
rows only, ``EVENTS_COLLECTED``, refused filter fields and an expiring token."""

import asyncio
import socket as sockets
import time
import tracemalloc
from typing import Any

import pytest
import websockets

from resolvers.codes import BAD_USER_INPUT, EVENTS_COLLECTED, UNAUTHENTICATED
from server.settings import Settings
from store.records import OperationKey
from store.tables import operation_event, watch_event
from tests.api.live_client import PROTOCOL, Served, Socket, multipart_first, served, socket
from tests.factories import aged_events, claimed_operation, committed_operation, marked
from tests.tokens import mint

OPERATION_EVENTS = (
    "subscription Events($filter: OperationFilter, $after: String) { "
    "operationEvents(filter: $filter, after: $after) { sequence action toState "
    "operation { callerDID operationID ownerDID state } } }"
)
WATCH_EVENTS = (
    "subscription Watches($after: String) { watchEvents(after: $after) { sequence action "
    "toStatus generation watch { ownerDID sourceID verificationStatus } } }"
)
LARGE_EVENTS = (
    "subscription Large($after: String) { operationEvents(after: $after) { sequence "
    "operation { operationID reissueIntent } } }"
)
TENANT = "did:key:tenant-a"
DAY_MS = 24 * 3600 * 1000
OTHER = "did:key:tenant-b"


async def event(sock: Socket, id_: str, field: str = "operationEvents") -> dict[str, Any]:
    """The next event of subscription ``id_``."""
    message = await sock.receive()
    assert message["type"] == "next" and message["id"] == id_, message
    assert "errors" not in message["payload"], message
    return message["payload"]["data"][field]


def codes_of(message: dict[str, Any]) -> list[str]:
    """The error codes of a refused subscription: an ``error`` message, or its first
    ``next`` carrying only errors."""
    errors = message["payload"] if message["type"] == "error" else message["payload"]["errors"]
    return [error["extensions"]["code"] for error in errors]


async def quiet(sock: Socket, seconds: float = 0.3) -> bool:
    """True when nothing arrives for ``seconds``."""
    try:
        await sock.receive(timeout_s=seconds)
    except TimeoutError:
        return True
    return False


async def opened(sock: Socket, id_: str, query: str = OPERATION_EVENTS, **variables: Any) -> None:
    """Subscribe, and wait until the stream stands at the log's head (a subscription
    without ``after`` starts there, so a write sent before it may not be streamed)."""
    await sock.subscribe(id_, query, **variables)
    await asyncio.sleep(0.2)


async def test_operation_events__each_write_in_order_as_it_commits(store):
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await opened(sock, "1")
        record = await claimed_operation(store)
        await marked(store, record)

        claimed, sent = await event(sock, "1"), await event(sock, "1")

    assert [claimed["action"], sent["action"]] == ["CLAIMED", "SEND_MARKED"]
    assert claimed["sequence"] < sent["sequence"]
    assert sent["operation"]["operationID"] == record.operation_id
    assert sent["operation"]["state"] == "ATTEMPTED"


async def test_operation_events__a_resume_with_after_loses_and_repeats_nothing(store):
    async with served(store) as server:
        async with socket(server) as sock:
            await sock.init()
            await opened(sock, "1")
            first = await claimed_operation(store, operation_id="op-1")
            seen = await event(sock, "1")
        # Written while no one listens: the resume must replay exactly these.
        await marked(store, first)
        second = await claimed_operation(store, operation_id="op-2", source_id="src-2")
        async with socket(server) as sock:
            await sock.init()
            await sock.subscribe("2", OPERATION_EVENTS, after=seen["sequence"])
            replayed = [await event(sock, "2"), await event(sock, "2")]
            await marked(store, second)
            live = await event(sock, "2")
            assert await quiet(sock)

    assert [(e["action"], e["operation"]["operationID"]) for e in [*replayed, live]] == [
        ("SEND_MARKED", "op-1"),
        ("CLAIMED", "op-2"),
        ("SEND_MARKED", "op-2"),
    ]
    sequences = [seen["sequence"], *(e["sequence"] for e in [*replayed, live])]
    assert sequences == sorted(set(sequences))


async def test_operation_events__a_filter_narrows_by_state_and_connector(store):
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await opened(sock, "1", filter={"connectorName": "crm", "states": ["COMMITTED"]})
        await committed_operation(store, operation_id="op-cal")
        await committed_operation(store, operation_id="op-crm", connector_name="crm")

        only = await event(sock, "1")
        assert await quiet(sock)

    assert only["action"] == "FINALIZED" and only["toState"] == "COMMITTED"
    assert only["operation"]["operationID"] == "op-crm"


async def test_operation_events__a_tenant_receives_only_its_own_rows(store):
    tenant = mint(TENANT, "operations:read")
    async with served(store) as server, socket(server) as sock:
        await sock.init(tenant)
        await opened(sock, "1")
        await claimed_operation(store, operation_id="op-b", caller_did=OTHER, owner_did=OTHER)
        await claimed_operation(store, operation_id="op-a", caller_did=OTHER, owner_did=TENANT)

        own = await event(sock, "1")
        assert await quiet(sock)

    assert own["operation"] == {
        "callerDID": OTHER,
        "operationID": "op-a",
        "ownerDID": TENANT,
        "state": "ATTEMPTED",
    }


async def test_operation_events__a_tenant_filtering_by_another_viewer_gets_nothing(store):
    tenant = mint(TENANT, "operations:read")
    async with served(store) as server, socket(server) as sock:
        await sock.init(tenant)
        await sock.subscribe("1", OPERATION_EVENTS, filter={"visibleTo": OTHER})
        message = await sock.receive()
        await claimed_operation(store, caller_did=OTHER, owner_did=OTHER)
        assert await quiet(sock)

    assert message == {"id": "1", "type": "complete"}


def event_ids(events: list[dict[str, Any]]) -> list[int]:
    """The log ids of streamed events (the low half of each ``sequence``)."""
    return [int(e["sequence"][16:], 16) for e in events]


async def test_operation_events__after_below_what_was_collected_is_events_collected(store):
    """The log is collected oldest first: a resume below the newest event collected would
    miss some, and is refused; one at it (the last event collected: its reader saw
    everything up to it) or above reads on with no gap."""
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await opened(sock, "1")
        for n in range(3):
            await claimed_operation(store, operation_id=f"op-{n}", source_id=f"s-{n}")
        seen = [await event(sock, "1") for _ in range(3)]
        await aged_events(store.db, operation_event, event_ids(seen[:2]))
        assert await store.events.collect_operation_events(DAY_MS, 10) == 2

        await sock.subscribe("2", OPERATION_EVENTS, after=seen[0]["sequence"])
        refused = await sock.receive()
        assert await sock.receive() == {"id": "2", "type": "complete"}
        await sock.subscribe("3", OPERATION_EVENTS, after=seen[1]["sequence"])
        resumed = await event(sock, "3")

    assert codes_of(refused) == [EVENTS_COLLECTED]
    assert refused["payload"]["errors"][0]["extensions"]["field"] == "after"
    assert resumed == seen[2]


async def test_operation_events__a_collected_operation_leaves_its_events_operation_null(
    store, clock
):
    """Collecting an operation leaves its events in the log: a resume reads them, with
    ``operation`` null (the row is gone)."""
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await opened(sock, "1")
        kept = await claimed_operation(store, operation_id="op-kept", source_id="s-kept")
        first = await event(sock, "1")
        done = await committed_operation(store, operation_id="op-done", source_id="s-done")
        history = await store.events.operation_events(
            OperationKey(caller_did=done.caller_did, operation_id=done.operation_id)
        )
        live = [await event(sock, "1") for _ in history]
        clock.advance(1)
        assert (
            await store.retention.collect_finished_operations(
                clock.now, failed_older_than=clock.now
            )
            == 1
        )

        await sock.subscribe("2", OPERATION_EVENTS, after=first["sequence"])
        replayed = [await event(sock, "2") for _ in history]

    assert [e["sequence"] for e in replayed] == [e["sequence"] for e in live]
    assert [e["action"] for e in replayed] == [e.action.upper() for e in history]
    assert replayed[-1]["action"] == "FINALIZED"
    assert {e["operation"] is None for e in replayed} == {True}
    assert {e["operation"]["operationID"] for e in live} == {done.operation_id}
    assert first["operation"]["operationID"] == kept.operation_id


CRM = {"connector_name": "crm", "account_key": "acct-crm"}


async def events_until(sock: Socket, id_: str, sequence: str) -> list[dict[str, Any]]:
    """The events of subscription ``id_`` up to the one at ``sequence``."""
    streamed = [await event(sock, id_)]
    while streamed[-1]["sequence"] < sequence:
        streamed.append(await event(sock, id_))
    return streamed


async def history(store: Any, record: Any) -> list[str]:
    """The sequences of ``record``'s events, oldest first."""
    key = OperationKey(caller_did=record.caller_did, operation_id=record.operation_id)
    return [e.sequence for e in await store.events.operation_events(key)]


async def collected_between(store: Any, clock: Any) -> tuple[str, list[str], list[str]]:
    """A live calendar operation first (its claim: where a reader stood), then A (crm)
    committed, B (calendar) committed and C (crm) claimed; A and B then collected. The
    reader's position, A's sequences, C's."""
    first = await claimed_operation(store, operation_id="op-first", source_id="s-first")
    a = await committed_operation(store, operation_id="op-a", source_id="s-a", **CRM)
    await committed_operation(store, operation_id="op-b", source_id="s-b")
    c = await claimed_operation(store, operation_id="op-c", source_id="s-c", **CRM)
    clock.advance(1)
    collected = await store.retention.collect_finished_operations(
        clock.now, failed_older_than=clock.now
    )
    assert collected == 2
    return (await history(store, first))[0], await history(store, a), await history(store, c)


@pytest.mark.parametrize(
    "filter", [{"connectorName": "crm"}, {"accountKey": "acct-crm"}], ids=lambda f: "+".join(f)
)
async def test_operation_events__a_filtered_resume_replays_a_collected_operations_events(
    store, clock, filter
):
    """Collecting A leaves its events, and a stream filtered to A's connector (or account)
    resumed from before them replays them in order, then C's, with no gap: the filter
    matches what each event carries, not A's row, which is gone."""
    async with served(store) as server, socket(server) as sock:
        before, a, c = await collected_between(store, clock)
        later = await claimed_operation(store, operation_id="op-d", source_id="s-d", **CRM)
        [d] = await history(store, later)
        await sock.init()
        await sock.subscribe("1", OPERATION_EVENTS, filter=filter, after=before)
        streamed = await events_until(sock, "1", d)

    assert [e["sequence"] for e in streamed] == [*a, *c, d]
    assert [e["action"] for e in streamed[:3]] == ["CLAIMED", "SEND_MARKED", "FINALIZED"]
    assert [e["operation"] for e in streamed[:3]] == [None] * 3


async def test_operation_events__a_filtered_resume_over_http_starts_at_the_collected_ones(
    store, clock
):
    """The same resume over multipart HTTP: its first event is A's claim."""
    async with served(store) as server:
        before, a, _ = await collected_between(store, clock)
        status, first = await multipart_first(
            server,
            {
                "query": OPERATION_EVENTS,
                "variables": {"filter": {"connectorName": "crm"}, "after": before},
            },
        )

    assert status == 200
    assert first["data"]["operationEvents"]["sequence"] == a[0]


async def test_operation_events__a_tenant_resumes_over_its_collected_operation_not_anothers(
    store, clock
):
    """A tenant's collected operation's events still reach it (as owner, not caller), in
    order; another tenant's collected operation's never do."""
    tenant = mint(TENANT, "operations:read")
    first = await claimed_operation(
        store, operation_id="op-first", source_id="s-first", caller_did=OTHER, owner_did=TENANT
    )
    theirs = {"caller_did": OTHER, "owner_did": OTHER}
    await committed_operation(store, operation_id="op-theirs", source_id="s-0", **theirs)
    mine = await committed_operation(
        store, operation_id="op-mine", source_id="s-1", caller_did=OTHER, owner_did=TENANT
    )
    await committed_operation(store, operation_id="op-theirs-2", source_id="s-2", **theirs)
    clock.advance(1)
    collected = await store.retention.collect_finished_operations(
        clock.now, failed_older_than=clock.now
    )
    assert collected == 3
    await store.operations.release_lease(first.caller_did, first.operation_id, "lease-A")
    claimed, released = await history(store, first)
    async with served(store) as server, socket(server) as sock:
        await sock.init(tenant)
        await sock.subscribe("1", OPERATION_EVENTS, after=claimed)
        streamed = await events_until(sock, "1", released)

    assert [e["sequence"] for e in streamed] == [*await history(store, mine), released]


async def test_operation_events__the_newest_collected_its_sequence_stays_valid(store):
    """Collecting the newest events does not move the log's head back: a reader that saw
    the newest event resumes there and gets what commits next; one past it is refused."""
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await opened(sock, "1")
        await claimed_operation(store)
        newest = await event(sock, "1")
        await sock.send({"id": "1", "type": "complete"})
        await aged_events(store.db, operation_event, event_ids([newest]))
        assert await store.events.collect_operation_events(DAY_MS, 10) == 1
        assert await store.events.operation_events_after(None, 10) == []

        past = newest["sequence"][:16] + f"{int(newest['sequence'][16:], 16) + 1:016x}"
        await sock.subscribe("2", OPERATION_EVENTS, after=past)
        refused = await sock.receive()
        assert await sock.receive() == {"id": "2", "type": "complete"}
        await sock.subscribe("3", OPERATION_EVENTS, after=newest["sequence"])
        later = await claimed_operation(store, operation_id="op-2", source_id="s-2")
        streamed = await event(sock, "3")

    assert codes_of(refused) == [BAD_USER_INPUT]
    assert streamed["operation"]["operationID"] == later.operation_id


async def test_watch_events__after_below_what_was_collected_is_events_collected(store):
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await opened(sock, "1", WATCH_EVENTS)
        for n in range(3):
            await committed_operation(store, operation_id=f"op-{n}", source_id=f"s-{n}")
        seen = [await event(sock, "1", "watchEvents") for _ in range(3)]
        await aged_events(store.db, watch_event, event_ids(seen[:2]))
        assert await store.events.collect_watch_events(DAY_MS, 10) == 2

        await sock.subscribe("2", WATCH_EVENTS, after=seen[0]["sequence"])
        refused = await sock.receive()
        assert await sock.receive() == {"id": "2", "type": "complete"}
        await sock.subscribe("3", WATCH_EVENTS, after=seen[1]["sequence"])
        resumed = await event(sock, "3", "watchEvents")

    assert codes_of(refused) == [EVENTS_COLLECTED]
    assert resumed == seen[2]


@pytest.mark.parametrize(
    "field", ["updatedAfter", "updatedBefore", "nodeKey", "documentIDs", "lastError"]
)
async def test_operation_events__a_filter_field_it_cannot_apply_is_refused(store, field):
    value: Any = ["doc"] if field == "documentIDs" else 1 if "updated" in field else "text"
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await sock.subscribe("1", OPERATION_EVENTS, filter={field: value})
        message = await sock.receive()

    assert codes_of(message) == [BAD_USER_INPUT]
    assert message["payload"]["errors"][0]["extensions"]["field"] == f"filter.{field}"


async def test_watch_events__a_finalize_opens_the_watch_as_it_commits(store):
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await opened(sock, "1", WATCH_EVENTS)
        await committed_operation(store)

        opening = await event(sock, "1", "watchEvents")

    assert opening["action"] == "OPENED" and opening["toStatus"] == "PENDING_VERIFICATION"
    assert opening["watch"]["verificationStatus"] == "PENDING_VERIFICATION"


async def test_watch_events__a_tenant_receives_only_its_own_watches(store):
    tenant = mint(TENANT, "watches:read")
    async with served(store) as server, socket(server) as sock:
        await sock.init(tenant)
        await opened(sock, "1", WATCH_EVENTS)
        await committed_operation(store, operation_id="op-b", caller_did=OTHER, owner_did=OTHER)
        await committed_operation(store, operation_id="op-a", caller_did=OTHER, owner_did=TENANT)

        own = await event(sock, "1", "watchEvents")
        assert await quiet(sock)

    assert own["watch"]["ownerDID"] == TENANT


async def test_operation_events__an_expiring_token_ends_the_stream(store):
    settings = Settings(sweeper=False, jwt_leeway_seconds=0)
    async with served(store, settings) as server, socket(server) as sock:
        await sock.init(mint(ttl=2))
        await sock.subscribe("1", OPERATION_EVENTS)
        message = await sock.receive()

    assert message["type"] == "next" and message["id"] == "1"
    assert [e["extensions"]["code"] for e in message["payload"]["errors"]] == [UNAUTHENTICATED]


@pytest.mark.parametrize(
    "after",
    [
        "f" * 32,
        "0" * 16 + "f" * 16,
        " " + "0" * 31,
        "0x" + "0" * 30,
        "0_" + "0" * 30,
        "-" + "0" * 31,
        "\u0660" * 32,
        "A" * 32,
    ],
)
async def test_operation_events__an_after_this_store_never_handed_out_is_refused(store, after):
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await claimed_operation(store)
        await sock.subscribe("1", OPERATION_EVENTS, after=after)
        message = await sock.receive()

    assert codes_of(message) == [BAD_USER_INPUT]


async def test_operation_events__an_after_past_the_newest_event_is_refused(store):
    """A sequence past the log's end (from another database, or one restored from an older
    backup) would stream nothing until the log caught up: it is refused, not a silent gap."""
    async with served(store) as server, socket(server) as sock:
        await sock.init()
        await claimed_operation(store)
        [newest] = await store.events.operation_events_after(None, 1)
        past = newest.sequence[:16] + f"{int(newest.sequence[16:], 16) + 1:016x}"
        await sock.subscribe("1", OPERATION_EVENTS, after=past)
        refused = await sock.receive()
        assert await sock.receive() == {"id": "1", "type": "complete"}
        await sock.subscribe("2", OPERATION_EVENTS, after=newest.sequence)
        later = await claimed_operation(store, operation_id="op-2", source_id="s-2")
        streamed = await event(sock, "2")

    assert codes_of(refused) == [BAD_USER_INPUT]
    assert refused["payload"]["errors"][0]["extensions"]["field"] == "after"
    assert streamed["operation"]["operationID"] == later.operation_id


async def unread_socket(server: Served) -> Socket:
    """A WebSocket whose client reads nothing once one message waits unread: a receive window
    of 4 KiB, a queue of one message (the ``websockets`` client stops reading its socket while
    its queue is full) and no compression (which would shrink the test's events to nothing)."""
    raw = sockets.socket()
    raw.setsockopt(sockets.SOL_SOCKET, sockets.SO_RCVBUF, 4096)
    raw.setblocking(False)
    await asyncio.get_running_loop().sock_connect(raw, ("127.0.0.1", server.port))
    connection = await websockets.connect(
        server.ws, sock=raw, subprotocols=[PROTOCOL], max_queue=1, compression=None
    )
    return Socket(connection)


async def test_operation_events__a_subscriber_that_reads_nothing_is_closed_holding_no_events(
    store,
):
    """A subscriber that stops reading while 400 events of 60 KB each (24 MB) commit loses its
    connection after ``SEND_TIMEOUT_SECONDS`` (aborted: the client sees it closed abnormally)
    and the server buffered none of them meanwhile (its Python memory peaks at a fraction of
    what was written); the client reads what had reached it, all in order, and a resume with
    ``after`` gives the rest, none lost and none repeated."""
    intent = {"body": "x" * 60_000}
    written = 400
    async with served(store, Settings(sweeper=False, send_timeout_seconds=1)) as server:
        sock = await unread_socket(server)
        await sock.init()
        await opened(sock, "1", LARGE_EVENTS)
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            for number in range(written):
                await claimed_operation(
                    store,
                    operation_id=f"op-{number}",
                    source_id=f"s-{number}",
                    reissue_intent=intent,
                )
            deadline = time.monotonic() + 15
            while server.app.state.hub.subjects and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert not server.app.state.hub.subjects, "the unread subscriber was not closed"
            peak = tracemalloc.get_traced_memory()[1] - baseline
        finally:
            tracemalloc.stop()
        received: list[dict[str, Any]] = []
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            while True:
                received.append(await event(sock, "1"))
        assert closed.value.rcvd is None  # aborted: no close frame
        reached = len(received)

        async with socket(server) as resumed:
            await resumed.init()
            await resumed.subscribe("2", LARGE_EVENTS, after=received[-1]["sequence"])
            for _ in range(written - len(received)):
                received.append(await event(resumed, "2"))
            assert await quiet(resumed)

    assert peak < written * len(intent["body"]) // 4, f"the server held {peak} bytes meanwhile"
    assert reached < written
    assert [e["operation"]["operationID"] for e in received] == [
        f"op-{number}" for number in range(written)
    ]
    assert all(e["operation"]["reissueIntent"] == intent for e in received)


async def test_operation_events__a_caught_up_filtered_stream_outlives_collecting_what_it_skipped(
    store, monkeypatch
):
    """A filtered stream that has read past events its filter skips stands past them: once
    they are collected it streams on (no ``EVENTS_COLLECTED``: it missed nothing)."""
    known: list[str | None] = []
    read = store.events.operation_events_after
    async with served(store) as server, socket(server) as sock:
        hub = server.app.state.hub

        async def spied(after: Any, limit: Any, filter: Any = None) -> Any:
            head = hub.heads.get("operation")
            page = await read(after, limit, filter)
            known.append(head)
            return page

        monkeypatch.setattr(store.events, "operation_events_after", spied)
        await sock.init()
        await claimed_operation(store, operation_id="op-first", source_id="s-first")
        await opened(sock, "1", filter={"connectorName": "crm"})
        for n in range(2):
            await claimed_operation(store, operation_id=f"op-{n}", source_id=f"s-{n}")
        head = await store.events.operation_events_head()
        deadline = time.monotonic() + 30
        while head not in known:
            assert time.monotonic() < deadline, "the stream never read past the skipped events"
            await asyncio.sleep(0.05)
        everything = await store.events.operation_events_after(None, 10)
        await aged_events(store.db, operation_event, [int(e.sequence[16:], 16) for e in everything])
        assert await store.events.collect_operation_events(DAY_MS, 10) == 3
        later = await claimed_operation(
            store, operation_id="op-crm", source_id="s-crm", connector_name="crm"
        )
        streamed = await event(sock, "1")

    assert streamed["operation"]["operationID"] == later.operation_id
