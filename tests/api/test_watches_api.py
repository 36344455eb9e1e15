"""The watch API over GraphQL (docs/api.md, 'Verifying and repairing'), on both backends: each query
and mutation, a BAD_USER_INPUT naming the field for each, rights, and CONFLICT for exhausted
retries. Watches are set up through the store (the factories); the part under test goes through
GraphQL."""

from typing import Any

import pytest
from graphql import GraphQLError

from resolvers.context import Context
from resolvers.loaders import Loaders
from resolvers.permissions import Viewer
from server.graph import build_schema
from store.errors import CasRetriesExhausted
from tests.api.conftest import GraphQLClient, error_codes
from tests.factories import (
    LEASE_MS,
    claimed_watch,
    pending_watch,
    repair_failed_watch,
    verified_watch,
)

IDENTITY = {
    "ownerDID": "did:key:owner",
    "connectorName": "calendar",
    "model": "Event",
    "accountKey": "acct-1",
    "sourceID": "evt-1",
}


def identity(n: int | None = None, **overrides: str) -> dict[str, str]:
    base = IDENTITY if n is None else IDENTITY | {"sourceID": f"evt-{n}"}
    return base | overrides


def entity(n: int, **overrides: str) -> dict[str, str]:
    return {
        "operation_id": f"op-{n}",
        "source_id": f"evt-{n}",
        "document_id": f"doc-{n}",
    } | overrides


async def refused(gql: GraphQLClient, mutation: str, input_type: str, value: Any) -> dict:
    """Send ``mutation`` with ``value`` as its input; return the single error."""
    body = await gql.query(
        f"mutation($input: {input_type}!) {{ {mutation}(input: $input) {{ __typename }} }}",
        {"input": value},
    )
    assert body.get("data") is None, body
    [error] = body["errors"]
    return error


# --- queries -------------------------------------------------------------------------------


async def test_watch__found_and_absent(gql, store):
    watch = await pending_watch(store, "digest-1")

    data = await gql.run("GetWatch", identity=IDENTITY)

    found = data["watch"]
    assert found["repairGeneration"] == 1
    assert found["verificationStatus"] == "PENDING_VERIFICATION"
    assert found["observedWinnerDigest"] == "digest-1"
    assert found["nextAttemptAt"] == watch.next_attempt_at
    assert found["documentID"] == "doc-1"
    absent = await gql.run("GetWatch", identity=identity(sourceID="evt-none"))
    assert absent["watch"] is None


async def test_watch__bad_identity_names_the_field(gql):
    body = await gql.query(
        "query($i: WatchIdentityInput!) { watch(identity: $i) { id } }",
        {"i": identity(ownerDID="")},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "ownerDID"


async def test_watch_by_document__found_absent_and_bad(gql, store):
    await pending_watch(store)

    assert (await gql.run("WatchByDocument", documentID="doc-1"))["watchByDocument"][
        "sourceID"
    ] == "evt-1"
    assert (await gql.run("WatchByDocument", documentID="doc-x"))["watchByDocument"] is None
    body = await gql.query('{ watchByDocument(documentID: "") { id } }')
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "documentID"


async def test_watches__filters_pages_and_operations(gql, store):
    for n in range(3):
        await pending_watch(store, None, **entity(n))
    await verified_watch(store, **entity(3))

    first = (await gql.run("WatchesPage", first=2))["watches"]
    assert [edge["node"]["sourceID"] for edge in first["edges"]] == ["evt-0", "evt-1"]
    assert first["pageInfo"]["hasNextPage"] is True
    assert first["edges"][0]["node"]["operations"] == [
        {"callerDID": "did:key:caller", "operationID": "op-0", "state": "COMMITTED"}
    ]
    rest = (await gql.run("WatchesPage", first=2, after=first["pageInfo"]["endCursor"]))["watches"]
    assert [edge["node"]["sourceID"] for edge in rest["edges"]] == ["evt-2", "evt-3"]
    assert rest["pageInfo"]["hasNextPage"] is False
    assert rest["pageInfo"]["hasPreviousPage"] is True
    verified = await gql.run("WatchesPage", filter={"status": "VERIFIED"})
    assert [e["node"]["sourceID"] for e in verified["watches"]["edges"]] == ["evt-3"]
    by_document = await gql.run("WatchesPage", filter={"documentIDs": ["doc-2", "doc-0"]})
    assert [e["node"]["sourceID"] for e in by_document["watches"]["edges"]] == ["evt-0", "evt-2"]
    none = await gql.run(
        "WatchesPage", filter={"ownerDID": "did:key:nobody", "connectorName": "calendar"}
    )
    assert none["watches"]["edges"] == []
    due = await gql.run("WatchesPage", filter={"dueBefore": store.clock() + 60_001})
    assert len(due["watches"]["edges"]) == 3


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ('after: "bogus"', "after"),
        ("first: 0", "first"),
        ("first: 501", "first"),
        ('filter: {documentIDs: ["d", ""]}', "documentIDs[1]"),
        ('filter: {model: ""}', "model"),
    ],
)
async def test_watches__bad_input_names_the_field(gql, arguments, field):
    body = await gql.query(f"{{ watches({arguments}) {{ edges {{ cursor }} }} }}")
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field


async def test_due_watches__due_and_claimable_only(gql, store, clock):
    due = await pending_watch(store, None, **entity(1))
    await claimed_watch(store, clock, claim_ms=10**9, **entity(2))

    data = await gql.run("DueWatches", now=clock.now, connectorName="calendar")

    assert [w["sourceID"] for w in data["dueWatches"]] == [due.source_id]
    assert (await gql.run("DueWatches", now=due.next_attempt_at - 1))["dueWatches"] == []
    body = await gql.query("{ dueWatches(now: 0, limit: 0) { id } }")
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "limit"


# --- armWatch ------------------------------------------------------------------------------


async def arm(gql, reason, triggering=None, due_at=None, **ident):
    data = await gql.run(
        "ArmWatch",
        input={
            "identity": identity(**ident),
            "reason": reason,
            "dueAt": due_at if due_at is not None else 1_750_000_005_000,
            "triggeringWinner": triggering,
        },
    )
    return data["armWatch"]


async def test_arm_watch__ingress_opens_from_verified_and_repair_failed(gql, store):
    await verified_watch(store, "digest-1")
    await repair_failed_watch(store, "digest-1", **entity(2, document_id="doc-1"))
    await store.winners.record_winner("doc-1", "digest-2")

    for source in ("evt-1", "evt-2"):
        armed = await arm(gql, "INGRESS", "digest-2", sourceID=source)
        assert armed["outcome"] == "OPENED"
        assert armed["watch"]["repairGeneration"] == 2
        assert armed["watch"]["verificationStatus"] == "PENDING_VERIFICATION"
        assert armed["watch"]["observedWinnerDigest"] == "digest-2"


async def test_arm_watch__ingress_noop_cases(gql, store):
    watch = await verified_watch(store, "digest-1")
    await store.winners.record_winner("doc-1", "digest-2")

    for triggering in ("digest-3", "digest-1", None):
        armed = await arm(gql, "INGRESS", triggering)
        assert armed["outcome"] == "NOOP"
        assert armed["watch"]["version"] == watch.version
    absent = await arm(gql, "INGRESS", "digest-2", sourceID="evt-none")
    assert absent == {"outcome": "NOOP", "watch": None}


@pytest.mark.parametrize(
    ("due_at", "expected"),
    [(1_750_000_001_000, 1_750_000_001_000), (1_750_000_090_000, 1_750_000_060_000)],
)
async def test_arm_watch__ingress_coalesces_to_earlier_due(gql, store, due_at, expected):
    await pending_watch(store, "digest-1")
    await store.winners.record_winner("doc-1", "digest-2")

    armed = await arm(gql, "INGRESS", "digest-2", due_at=due_at)

    assert armed["outcome"] == "COALESCED"
    assert armed["watch"]["nextAttemptAt"] == expected
    assert armed["watch"]["repairGeneration"] == 1


async def test_arm_watch__manual_opens(gql, store):
    await pending_watch(store)

    armed = await arm(gql, "MANUAL")

    assert armed["outcome"] == "OPENED" and armed["watch"]["repairGeneration"] == 2


async def test_arm_watch__finalize_is_no_reason(gql, store):
    error = await refused(
        gql,
        "armWatch",
        "ArmWatchInput",
        {"identity": IDENTITY, "reason": "FINALIZE", "dueAt": 0},
    )
    assert error["extensions"]["code"] == "BAD_USER_INPUT"


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"triggeringWinner": ""}, "triggeringWinner"),
        ({"identity": identity(sourceID="")}, "sourceID"),
    ],
)
async def test_arm_watch__bad_input_names_the_field(gql, override, field):
    value = {"identity": IDENTITY, "reason": "INGRESS", "dueAt": 0} | override
    error = await refused(gql, "armWatch", "ArmWatchInput", value)
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": field}


async def test_arm_watch__exhausted_retries_are_conflict(gql, store, monkeypatch):
    async def exhausted(*args, **kwargs):
        raise CasRetriesExhausted("armWatch", 6)

    monkeypatch.setattr(store.watches, "arm_watch", exhausted)
    error = await refused(
        gql, "armWatch", "ArmWatchInput", {"identity": IDENTITY, "reason": "MANUAL", "dueAt": 0}
    )
    assert error["extensions"] == {"code": "CONFLICT", "retryable": True}


# --- claimWatchAttempt / deferWatch ---------------------------------------------------------


async def test_claim_watch_attempt__applies_then_refused_with_current_watch(gql, store, clock):
    watch = await pending_watch(store)
    now = clock.now = watch.next_attempt_at
    claim = {"identity": IDENTITY, "generation": 1, "until": now + LEASE_MS, "now": now}

    first = (await gql.run("ClaimWatchAttempt", input=claim))["claimWatchAttempt"]
    again = (await gql.run("ClaimWatchAttempt", input=claim))["claimWatchAttempt"]

    assert first["applied"] is True and first["watch"]["claimedUntil"] == now + LEASE_MS
    assert again["applied"] is False and again["watch"] == first["watch"]
    absent = await gql.run(
        "ClaimWatchAttempt", input=claim | {"identity": identity(sourceID="evt-none")}
    )
    assert absent["claimWatchAttempt"] == {"applied": False, "watch": None}
    error = await refused(
        gql, "claimWatchAttempt", "ClaimWatchAttemptInput", claim | {"generation": -1}
    )
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": "generation"}


async def test_defer_watch__same_claim_applies_other_refused(gql, store, clock):
    watch = await claimed_watch(store, clock)
    defer = {
        "identity": IDENTITY,
        "generation": 1,
        "claimedUntil": watch.claimed_until + 1,
        "nextAttemptAt": clock.now + 5_000,
        "reason": "AUTH",
    }

    other = (await gql.run("DeferWatch", input=defer))["deferWatch"]
    same = (await gql.run("DeferWatch", input=defer | {"claimedUntil": watch.claimed_until}))[
        "deferWatch"
    ]

    assert other["applied"] is False and other["watch"]["claimedUntil"] == watch.claimed_until
    assert same["applied"] is True
    assert same["watch"]["deferReason"] == "AUTH" and same["watch"]["claimedUntil"] is None
    error = await refused(
        gql, "deferWatch", "DeferWatchInput", defer | {"identity": identity(model="")}
    )
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": "model"}


# --- recordVerification ---------------------------------------------------------------------


def verification(**overrides: Any) -> dict[str, Any]:
    return {
        "identity": IDENTITY,
        "generation": 1,
        "fetchedDigest": "digest-1",
        "maxAttempts": 2,
        "dueAt": 1_750_000_100_000,
    } | overrides


async def test_record_verification__outcomes(gql, store, clock):
    watch = await claimed_watch(store, clock)

    stale_gen = await gql.run(
        "RecordVerification", input=verification(generation=2, claimedUntil=1)
    )
    stale_claim = await gql.run("RecordVerification", input=verification(claimedUntil=1))
    pending = await gql.run("RecordVerification", input=verification(fetchedDigest="digest-x"))
    failed = await gql.run("RecordVerification", input=verification(fetchedDigest="digest-x"))

    assert stale_gen["recordVerification"]["outcome"] == "STALE_GENERATION"
    assert stale_gen["recordVerification"]["watch"]["version"] == watch.version
    assert stale_claim["recordVerification"]["outcome"] == "STALE_CLAIM"
    assert pending["recordVerification"]["outcome"] == "PENDING"
    assert pending["recordVerification"]["watch"]["nextAttemptAt"] == 1_750_000_100_000
    assert failed["recordVerification"]["outcome"] == "REPAIR_FAILED"
    assert failed["recordVerification"]["watch"]["verificationStatus"] == "REPAIR_FAILED"


async def test_record_verification__verified_sets_both_watermarks(gql, store):
    await pending_watch(store, "digest-1")

    data = await gql.run("RecordVerification", input=verification())

    result = data["recordVerification"]
    assert result["outcome"] == "VERIFIED"
    assert result["watch"]["verifiedStateDigest"] == "digest-1"
    assert result["watch"]["observedWinnerDigest"] == "digest-1"


async def test_record_verification__no_watch_stale_generation_null(gql):
    data = await gql.run(
        "RecordVerification", input=verification(identity=identity(sourceID="evt-none"))
    )
    assert data["recordVerification"] == {"outcome": "STALE_GENERATION", "watch": None}


@pytest.mark.parametrize(
    ("override", "field"),
    [({"maxAttempts": 0}, "maxAttempts"), ({"fetchedDigest": ""}, "fetchedDigest")],
)
async def test_record_verification__bad_input_names_the_field(gql, store, override, field):
    await pending_watch(store)
    error = await refused(
        gql, "recordVerification", "RecordVerificationInput", verification(**override)
    )
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": field}
    stored = await gql.run("GetWatch", identity=IDENTITY)
    assert stored["watch"]["version"] == 0


# --- recordIngress / resume ------------------------------------------------------------------


async def test_record_ingress__one_result_per_watch(gql, store):
    await verified_watch(store, "digest-1")
    await verified_watch(store, "digest-1", **entity(2, document_id="doc-1", connector_name="crm"))

    data = await gql.run(
        "RecordIngress", input={"documentID": "doc-1", "winnerDigest": "digest-2", "dueAt": 5}
    )

    results = data["recordIngress"]["results"]
    assert [r["outcome"] for r in results] == ["OPENED", "OPENED"]
    assert [r["watch"]["connectorName"] for r in results] == ["calendar", "crm"]
    assert all(r["watch"]["nextAttemptAt"] == 5 for r in results)
    empty = await gql.run("RecordIngress", input={"documentID": "doc-9", "winnerDigest": "d"})
    assert empty["recordIngress"]["results"] == []
    assert await store.winners.read_winner("doc-9") == "d"
    error = await refused(
        gql, "recordIngress", "RecordIngressInput", {"documentID": "doc-1", "winnerDigest": ""}
    )
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": "winnerDigest"}


async def test_resume__counts_each_reason(gql, store, clock):
    for n, reason in enumerate(["offline", "auth", "auth"]):
        watch = await claimed_watch(store, clock, **entity(n))
        deferred = await store.watches.defer_watch(
            watch.identity, 1, watch.claimed_until, clock.now + 10**6, reason
        )
        assert deferred is not None

    offline = await gql.run("ResumeOfflineDeferred", input={"now": clock.now})
    auth = await gql.run(
        "ResumeAuthDeferred",
        input={"ownerDID": "did:key:owner", "connectorNames": ["calendar"], "now": clock.now},
    )

    assert offline["resumeOfflineDeferred"] == {"resumedOperations": 0, "resumedWatches": 1}
    assert auth["resumeAuthDeferred"] == {"resumedOperations": 0, "resumedWatches": 2}
    error = await refused(
        gql,
        "resumeAuthDeferred",
        "ResumeAuthDeferredInput",
        {"ownerDID": "", "connectorNames": ["calendar"], "now": 0},
    )
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "field": "ownerDID"}
    error = await refused(gql, "resumeOfflineDeferred", "ResumeOfflineDeferredInput", {"now": -1})
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert "now" in error["message"]


# --- rights -----------------------------------------------------------------------------------

WHO = '{ownerDID: "o", connectorName: "c", model: "m", accountKey: "a", sourceID: "s"}'
RIGHTS = [
    (f"{{ watch(identity: {WHO}) {{ id }} }}", "watches:read"),
    ('{ watchByDocument(documentID: "d") { id } }', "watches:read"),
    ("{ watches { edges { cursor } } }", "watches:read"),
    ("{ dueWatches(now: 0) { id } }", "service"),
    (
        f"mutation {{ armWatch(input: {{identity: {WHO}, reason: MANUAL, dueAt: 0}}) "
        "{ outcome } }",
        "watches:write",
    ),
    (
        f"mutation {{ claimWatchAttempt(input: {{identity: {WHO}, generation: 1, until: 1, "
        "now: 0}) { applied } }",
        "watches:write",
    ),
    (
        f"mutation {{ deferWatch(input: {{identity: {WHO}, generation: 1, claimedUntil: 1, "
        "nextAttemptAt: 0}) { applied } }",
        "watches:write",
    ),
    (
        f"mutation {{ recordVerification(input: {{identity: {WHO}, generation: 1, "
        "fetchedDigest: null, maxAttempts: 1, dueAt: 0}) { outcome } }",
        "watches:write",
    ),
    (
        'mutation { recordIngress(input: {documentID: "d", winnerDigest: "w"}) '
        "{ results { outcome } } }",
        "watches:write",
    ),
    ("mutation { resumeOfflineDeferred(input: {now: 0}) { resumedWatches } }", "watches:write"),
    ("mutation { resumeOfflineDeferred(input: {now: 0}) { resumedWatches } }", "operations:write"),
    *(
        (
            'mutation { resumeAuthDeferred(input: {ownerDID: "o", connectorNames: ["c"], '
            "now: 0}) { resumedWatches } }",
            scope,
        )
        for scope in ("watches:write", "operations:write")
    ),
    ("{ watches { edges { node { operations { id } } } } }", "operations:read"),
]


@pytest.mark.parametrize(("query", "scope"), RIGHTS)
async def test_rights__each_field_needs_its_scope(store, query, scope):
    if "operations { id }" in query:
        await pending_watch(store)
    schema = build_schema()
    viewer = Viewer(did="did:key:someone", scopes=Viewer.service().scopes - {scope})
    context = Context(store=store, viewer=viewer, loaders=Loaders(store), request_id="r")

    result = await schema.execute(query, context_value=context)

    assert result.errors, result
    [error] = result.errors
    assert isinstance(error, GraphQLError)
    assert error.extensions["code"] == "FORBIDDEN", error


async def test_rights__owner_sees_only_own_watches(store):
    await pending_watch(store, None, **entity(1))
    await pending_watch(store, None, **entity(2, owner_did="did:key:other"))
    schema = build_schema()
    viewer = Viewer(did="did:key:other", scopes=frozenset({"watches:read", "operations:read"}))
    context = Context(store=store, viewer=viewer, loaders=Loaders(store), request_id="r")

    result = await schema.execute(
        "{ watches { edges { node { ownerDID operations { ownerDID } } } } "
        ' mine: watchByDocument(documentID: "doc-2") { sourceID } '
        ' theirs: watchByDocument(documentID: "doc-1") { sourceID } }',
        context_value=context,
    )

    assert result.errors is None, result.errors
    edges = result.data["watches"]["edges"]
    assert [edge["node"]["ownerDID"] for edge in edges] == ["did:key:other"]
    assert edges[0]["node"]["operations"] == [{"ownerDID": "did:key:other"}]
    assert result.data["mine"] == {"sourceID": "evt-2"} and result.data["theirs"] is None
