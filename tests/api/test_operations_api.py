"""The operations API over GraphQL: the contract of docs/api.md, 'Driving a write-back', on both
backends."""

import base64
import json
from typing import Any

import pytest

from schema.node import encode_opaque
from tests.api.conftest import GraphQLClient, claim_input, error_codes

YEAR_2100 = 4102444800000
KEY = {"callerDID": "did:key:caller", "operationID": "op-1"}


async def claim(gql: GraphQLClient, **overrides: Any) -> dict[str, Any]:
    data = await gql.run("ClaimOperation", input=claim_input(**overrides))
    return data["claimOperation"]


async def count_operations(gql: GraphQLClient) -> int:
    body = await gql.query("{ operations(first: 500) { edges { cursor } } }")
    return len(body["data"]["operations"]["edges"])


async def test_claim_operation__claimed_then_exists_then_conflict(gql):
    first = await claim(gql)
    assert first["__typename"] == "OperationClaimed"
    assert first["operation"]["state"] == "ATTEMPTED"
    assert first["operation"]["version"] == 0
    assert first["operation"]["leaseToken"] == "lease-A"

    again = await claim(gql)
    assert again["__typename"] == "OperationExists"
    assert again["operation"]["id"] == first["operation"]["id"]

    drifted = await claim(gql, payloadHash="sha256:bbb")
    assert drifted == {
        "__typename": "OperationConflict",
        "callerDID": "did:key:caller",
        "operationID": "op-1",
        "message": drifted["message"],
    }
    assert drifted["message"]
    stored = await gql.run("GetOperation", **KEY)
    assert stored["operation"]["updatedAt"] == first["operation"]["updatedAt"]


async def test_epoch_millis__year_2100_round_trips(gql, clock):
    claimed = await claim(gql, leaseExpiresAt=clock.now + 60_000)
    assert claimed["operation"]["leaseExpiresAt"] == clock.now + 60_000
    deferred = await gql.run(
        "DeferOperation",
        input=KEY | {"nextAttemptAt": YEAR_2100 + 1, "leaseToken": "lease-A", "reason": "OFFLINE"},
    )
    assert deferred["deferOperation"]["applied"] is True
    assert deferred["deferOperation"]["operation"]["nextAttemptAt"] == YEAR_2100 + 1
    assert deferred["deferOperation"]["operation"]["deferReason"] == "OFFLINE"
    stored = await gql.run("GetOperation", **KEY)
    assert stored["operation"]["nextAttemptAt"] == YEAR_2100 + 1
    assert stored["operation"]["leaseExpiresAt"] == clock.now + 60_000
    assert (await gql.run("DueOperations", now=YEAR_2100))["dueOperations"] == []
    due = await gql.run("DueOperations", now=YEAR_2100 + 2)
    assert [op["nextAttemptAt"] for op in due["dueOperations"]] == [YEAR_2100 + 1]
    clock.now = YEAR_2100 + 2
    assert (await gql.query("{ serverTime }"))["data"]["serverTime"] == YEAR_2100 + 2


@pytest.mark.parametrize("bad", [1.0, 1.5, True, "1", 2**53, -1])
async def test_epoch_millis__refused_values_write_nothing(gql, bad):
    body = await gql.query(
        "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }",
        {"input": claim_input(leaseExpiresAt=bad)},
    )
    assert "data" not in body  # refused before execution: no data entry
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert await count_operations(gql) == 0


@pytest.mark.parametrize("literal", ["1.0", "true", '"1"', str(2**53), "-1"])
async def test_epoch_millis__refused_literals(gql, literal):
    body = await gql.query(f"{{ dueOperations(now: {literal}) {{ id }} }}")
    assert error_codes(body) == ["BAD_USER_INPUT"]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("mutation { claimOperation(input: {", "GRAPHQL_PARSE_FAILED"),
        ("{ operations { nope } }", "GRAPHQL_VALIDATION_FAILED"),
        (
            'mutation { acquireLease(input: {callerDID: "a", operationID: "b", token: "t"}) '
            "{ applied } }",
            "BAD_USER_INPUT",
        ),
        (
            'mutation { acquireLease(input: {callerDID: "a", operationID: "b", token: 5, '
            "expiresAt: 1}) { applied } }",
            "BAD_USER_INPUT",
        ),
        ('{ operation(callerDID: "a") { id } }', "BAD_USER_INPUT"),
    ],
)
async def test_malformed_requests__graphql_errors_never_500(gql, query, code):
    response = await gql.http.post("/graphql", json={"query": query})
    assert response.status_code == 200
    assert error_codes(response.json()) == [code]


async def test_malformed_variables__wrong_types_write_nothing(gql):
    bad_version = {"input": KEY | {"token": "t", "expiresAt": "soon"}}
    body = await gql.query(
        "mutation($input: AcquireLeaseInput!) { acquireLease(input: $input) { applied } }",
        bad_version,
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    body = await gql.query(
        "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }",
        {"input": claim_input(callerDID=None)},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert await count_operations(gql) == 0


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        b"null",
        b"5",
        b'"query"',
        b'[{"query": "{ serverTime }"}]',
        b'{"query": 5}',
        b'{"query": "{ serverTime }", "variables": 3}',
        b'{"query": "\xff\xfe"}',
        b'{"query": "{ serverTime }", "variables": {"n": ' + b"9" * 5000 + b"}}",
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
async def test_malformed_http_bodies__400_with_a_code(gql, body):
    response = await gql.http.post(
        "/graphql", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert error_codes(response.json()) == ["BAD_REQUEST"]


async def test_store_input_errors__bad_user_input_naming_the_field(gql):
    body = await gql.query(
        "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }",
        {"input": claim_input(callerDID="")},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "callerDID"
    assert "callerDID" in body["errors"][0]["message"]
    assert await count_operations(gql) == 0


async def test_mark_send_started__reserved_marker_refused(gql):
    await claim(gql)
    body = await gql.query(
        "mutation($input: MarkSendStartedInput!) { markSendStarted(input: $input) { applied } }",
        {"input": KEY | {"leaseToken": "lease-A", "marker": "*contested*"}},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "marker"
    stored = await gql.run("GetOperation", **KEY)
    assert stored["operation"]["sendMarker"] is None


async def test_record_operation__committed_refused_and_terminal_stays(gql):
    claimed = (await claim(gql))["operation"]
    record = KEY | {"leaseToken": "lease-A", "version": claimed["version"]}
    body = await gql.query(
        "mutation($input: RecordOperationInput!) { recordOperation(input: $input) { applied } }",
        {"input": record | {"fromState": "ATTEMPTED", "toState": "COMMITTED"}},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "toState"

    failed = await gql.run(
        "RecordOperation",
        input=record | {"fromState": "ATTEMPTED", "toState": "FAILED", "kind": "permanent"},
    )
    assert failed["recordOperation"]["applied"] is True
    assert failed["recordOperation"]["operation"]["state"] == "FAILED"
    assert failed["recordOperation"]["operation"]["attempts"] == 1
    back = await gql.run(
        "RecordOperation",
        input=record | {"version": 1, "fromState": "FAILED", "toState": "ATTEMPTED"},
    )
    assert back["recordOperation"]["applied"] is False
    assert back["recordOperation"]["operation"]["state"] == "FAILED"
    assert back["recordOperation"]["operation"]["version"] == 1


async def test_cas_writes__refused_returns_current_record(gql):
    await claim(gql)
    stolen = await gql.run("AcquireLease", input=KEY | {"token": "lease-B", "leaseMs": 60_000})
    assert stolen["acquireLease"]["applied"] is False
    assert stolen["acquireLease"]["operation"]["leaseToken"] == "lease-A"
    stale = await gql.run(
        "RecordOperation",
        input=KEY
        | {"leaseToken": "lease-A", "version": 7, "fromState": "ATTEMPTED", "toState": "FAILED"},
    )
    assert stale["recordOperation"]["applied"] is False
    assert stale["recordOperation"]["operation"]["version"] == 0


async def test_cas_writes__absent_key_returns_null(gql):
    absent = {"callerDID": "did:key:nobody", "operationID": "none"}
    for name, extra in [
        ("AcquireLease", {"token": "t", "leaseMs": 60_000}),
        ("RenewLease", {"token": "t", "leaseMs": 60_000}),
        ("ReleaseLease", {"token": "t"}),
        ("MarkSendStarted", {"leaseToken": "t", "marker": "m"}),
        ("DeferOperation", {"nextAttemptAt": 1}),
        (
            "RecordOperation",
            {"leaseToken": "t", "version": 0, "fromState": "ATTEMPTED", "toState": "FAILED"},
        ),
        ("FinalizeOperation", {"leaseToken": "t", "version": 0, "dueAt": 1}),
    ]:
        data = await gql.run(name, input=absent | extra)
        payload = next(iter(data.values()))
        assert payload["applied"] is False, name
        assert payload["operation"] is None, name
    assert (await gql.run("GetOperation", **absent))["operation"] is None


async def test_lease_lifecycle__renew_release_and_take_over(gql, clock):
    await claim(gql, leaseExpiresAt=clock.now + 1000)
    renewed = await gql.run(
        "RenewLease", input=KEY | {"token": "lease-A", "expiresAt": clock.now + 5000}
    )
    assert renewed["renewLease"]["operation"]["leaseExpiresAt"] == clock.now + 5000
    clock.advance(5000)
    held = await gql.run("AcquireLease", input=KEY | {"token": "B", "expiresAt": clock.now + 1_000})
    assert held["acquireLease"]["applied"] is False
    clock.advance(1)
    taken = await gql.run(
        "AcquireLease", input=KEY | {"token": "B", "expiresAt": clock.now + 9_000}
    )
    assert taken["acquireLease"]["applied"] is True
    assert taken["acquireLease"]["operation"]["leaseToken"] == "B"
    released = await gql.run("ReleaseLease", input=KEY | {"token": "B"})
    assert released["releaseLease"]["operation"]["leaseToken"] is None
    assert released["releaseLease"]["operation"]["leaseExpiresAt"] is None


async def test_finalize_operation__commits_and_arms_watch(gql, store, clock):
    await store.winners.record_winner("doc-1", "digest-1")
    claimed = (await claim(gql))["operation"]
    marked = await gql.run(
        "MarkSendStarted", input=KEY | {"leaseToken": "lease-A", "marker": "run-1"}
    )
    assert marked["markSendStarted"]["operation"]["sendMarker"] == "run-1"
    done = await gql.run(
        "FinalizeOperation",
        input=KEY
        | {
            "leaseToken": "lease-A",
            "version": claimed["version"],
            "dueAt": clock.now + 60_000,
            "resultEntity": {"id": "remote-1", "etag": 3},
            "providerEtag": "etag-3",
        },
    )
    payload = done["finalizeOperation"]
    assert payload["applied"] is True
    assert payload["operation"]["state"] == "COMMITTED"
    assert payload["operation"]["attempts"] == 1
    assert payload["operation"]["version"] == 1
    assert payload["operation"]["sendMarker"] is None
    assert payload["operation"]["leaseToken"] == "lease-A"
    assert payload["operation"]["resultEntity"] == {"id": "remote-1", "etag": 3}
    assert payload["operation"]["providerEtag"] == "etag-3"
    assert payload["watch"]["repairGeneration"] == 1
    assert payload["watch"]["verificationStatus"] == "PENDING_VERIFICATION"
    assert payload["watch"]["observedWinnerDigest"] == "digest-1"
    assert payload["watch"]["nextAttemptAt"] == clock.now + 60_000
    assert payload["watch"]["documentID"] == "doc-1"

    again = await gql.run(
        "FinalizeOperation", input=KEY | {"leaseToken": "lease-A", "version": 0, "dueAt": 1}
    )
    assert again["finalizeOperation"]["applied"] is False
    assert again["finalizeOperation"]["watch"] is None
    assert again["finalizeOperation"]["operation"]["version"] == 1


async def test_operations__keyset_pages_in_order(gql, clock):
    for index in range(5):
        clock.advance(10)
        await claim(gql, operationID=f"op-{index}", documentID=f"doc-{index % 2}")
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        data = await gql.run("OperationsPage", first=2, after=after)
        connection = data["operations"]
        seen += [edge["node"]["operationID"] for edge in connection["edges"]]
        pages += 1
        assert connection["pageInfo"]["hasPreviousPage"] is (after is not None)
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]
    assert seen == [f"op-{index}" for index in range(5)]
    assert pages == 3
    filtered = await gql.run(
        "OperationsPage", filter={"documentIDs": ["doc-1"], "states": ["ATTEMPTED"]}
    )
    assert [e["node"]["operationID"] for e in filtered["operations"]["edges"]] == ["op-1", "op-3"]
    empty = await gql.run("OperationsPage", filter={"states": []})
    assert empty["operations"]["edges"] == []


async def pages_of(gql: GraphQLClient, order: str, **start: Any) -> list[list[str]]:
    """Every page of 2, from ``start`` (``first`` or ``last``) on in its direction, as the
    operation ids each shows, in the order the page lists them."""
    pages: list[list[str]] = []
    arguments: dict[str, Any] = dict(start)
    while True:
        data = (await gql.run("DashboardOperations", orderBy=order, **arguments))["operations"]
        pages.append([edge["node"]["operationID"] for edge in data["edges"]])
        info = data["pageInfo"]
        assert data["totalCount"] == 5
        if "first" in start:
            assert info["hasPreviousPage"] is ("after" in arguments)
            if not info["hasNextPage"]:
                return pages
            arguments = {"first": 2, "after": info["endCursor"]}
        else:
            assert info["hasNextPage"] is ("before" in arguments)
            if not info["hasPreviousPage"]:
                return pages
            arguments = {"last": 2, "before": info["startCursor"]}


@pytest.mark.parametrize(
    ("order", "listed"),
    [("OLDEST_FIRST", [0, 1, 2, 3, 4]), ("NEWEST_FIRST", [4, 3, 2, 1, 0])],
)
async def test_operations__pages_either_way_in_either_order_with_the_total(
    gql, clock, order, listed
):
    for index in range(5):
        clock.advance(10)
        await claim(gql, operationID=f"op-{index}", documentID=f"doc-{index}")
    ids = [f"op-{index}" for index in listed]

    forward = await pages_of(gql, order, first=2)
    backward = await pages_of(gql, order, last=2)

    assert forward == [ids[0:2], ids[2:4], ids[4:]]
    assert backward == [ids[3:], ids[1:3], ids[:1]]


async def test_operations__total_counts_the_filter_not_the_page(gql, clock):
    for index in range(3):
        clock.advance(10)
        await claim(gql, operationID=f"op-{index}", documentID=f"doc-{index % 2}")

    data = await gql.run("DashboardOperations", filter={"documentIDs": ["doc-0"]}, first=1)
    empty = await gql.run("DashboardOperations", filter={"states": []})

    assert data["operations"]["totalCount"] == 2
    assert len(data["operations"]["edges"]) == 1
    assert empty["operations"]["totalCount"] == 0


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"first": 2, "last": 2}, "last"),
        ({"after": "x", "before": "y"}, "before"),
        ({"last": 0}, "last"),
        ({"last": 501}, "last"),
        ({"last": 2, "before": "bogus"}, "before"),
        # A cursor of the right shape whose parts are not an operation's order key.
        ({"last": 2, "before": encode_opaque(["1", "did:key:caller", "op-1"])}, "before"),
        ({"last": 2, "before": encode_opaque([-1, "did:key:caller", "op-1"])}, "before"),
        ({"first": 2, "after": encode_opaque([-1, "did:key:caller", "op-1"])}, "after"),
    ],
)
async def test_operations__bad_backward_page_arguments_name_the_field(gql, arguments, field):
    body = await gql.query(
        "query($first: Int, $after: String, $last: Int, $before: String) { operations("
        "first: $first, after: $after, last: $last, before: $before) { edges { cursor } } }",
        arguments,
    )

    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == field


@pytest.mark.parametrize(("first", "after"), [(0, None), (501, None), (-1, None), (2, "bogus")])
async def test_operations__bad_page_arguments(gql, first, after):
    body = await gql.query(
        "query($first: Int, $after: String) { operations(first: $first, after: $after) "
        "{ edges { cursor } } }",
        {"first": first, "after": after},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] in ("first", "after")


async def test_node__operation_watch_and_unknown_ids(gql, clock):
    claimed = (await claim(gql))["operation"]
    node = await gql.run("NodeByID", id=claimed["id"])
    assert node["node"]["__typename"] == "Operation"
    assert node["node"]["operationID"] == "op-1"
    done = await gql.run(
        "FinalizeOperation", input=KEY | {"leaseToken": "lease-A", "version": 0, "dueAt": 5}
    )
    watch = await gql.run("NodeByID", id=done["finalizeOperation"]["watch"]["id"])
    assert watch["node"]["__typename"] == "Watch"
    assert watch["node"]["sourceID"] == "evt-1"
    for bad in ["", "not-base64!", "WyJPcGVyYXRpb24iLCJub3BlIl0", "W10"]:
        body = await gql.query("query($id: ID!) { node(id: $id) { id } }", {"id": bad})
        assert error_codes(body) == ["NOT_FOUND"], bad


async def test_has_newer_operation_on_document(gql, clock):
    await claim(gql, operationID="op-1")
    assert (await gql.run("HasNewerOperation", **KEY))["hasNewerOperationOnDocument"] is False
    clock.advance(1)
    await claim(gql, operationID="op-2")
    assert (await gql.run("HasNewerOperation", **KEY))["hasNewerOperationOnDocument"] is True
    absent = {"callerDID": "x", "operationID": "y"}
    assert (await gql.run("HasNewerOperation", **absent))["hasNewerOperationOnDocument"] is False


async def test_due_operations__order_and_limit(gql, clock):
    start = clock.now
    for index in range(3):
        await claim(
            gql, operationID=f"op-{index}", sourceID=f"evt-{index}", leaseExpiresAt=start + 2_000
        )
        clock.advance(1)
    await gql.run(
        "DeferOperation",
        input={"callerDID": "did:key:caller", "operationID": "op-0"}
        | {"nextAttemptAt": start + 5_000, "leaseToken": "lease-A"},
    )
    assert (await gql.run("DueOperations", now=start + 2_000))["dueOperations"] == []
    due = await gql.run("DueOperations", now=start + 2_001)
    assert [op["operationID"] for op in due["dueOperations"]] == ["op-1", "op-2"]
    later = await gql.run("DueOperations", now=start + 4_000, limit=2)
    assert [op["operationID"] for op in later["dueOperations"]] == ["op-1", "op-2"]
    body = await gql.query("{ dueOperations(now: 1, limit: 501) { id } }")
    assert error_codes(body) == ["BAD_USER_INPUT"]


async def test_operation_watch__nested_through_loader(gql):
    # op-1, finalized below, is claimed first: only an entity's first claim takes its lease.
    for index in (1, 0, 2):
        await claim(gql, operationID=f"op-{index}")
    await gql.run(
        "FinalizeOperation", input=KEY | {"leaseToken": "lease-A", "version": 0, "dueAt": 5}
    )
    page = await gql.run("OperationsPage")
    watches = [edge["node"]["watch"] for edge in page["operations"]["edges"]]
    assert len(watches) == 3
    assert all(
        w == {"repairGeneration": 1, "verificationStatus": "PENDING_VERIFICATION"} for w in watches
    )


@pytest.mark.parametrize(
    "key", [[1, 2, 3], ["x", "a", "b"], [2**70, "a", "b"], [{"a": 1}, "a", "b"], [1, "a\x00", "b"]]
)
async def test_operations__decodable_but_foreign_cursor_refused(gql, key):
    body = await gql.query(
        "query($after: String) { operations(after: $after) { edges { cursor } } }",
        {"after": encode_opaque(key)},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "after"


@pytest.mark.parametrize("bad", ["did:\x00", "\ud800"])
async def test_keys__nul_and_lone_surrogates_refused_on_both_backends(gql, bad):
    async def post_ascii(query: str, variables: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps({"query": query, "variables": variables})
        response = await gql.http.post(
            "/graphql", content=payload, headers={"content-type": "application/json"}
        )
        return response.json()

    read = await post_ascii(
        'query($c: String!) { operation(callerDID: $c, operationID: "x") { id } }', {"c": bad}
    )
    assert error_codes(read) == ["BAD_USER_INPUT"]
    claimed = await post_ascii(
        "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }",
        {"input": claim_input(operationID=bad)},
    )
    assert error_codes(claimed) == ["BAD_USER_INPUT"]
    assert await count_operations(gql) == 0


async def test_record_operation__http_status_outside_http_range_refused(gql):
    await claim(gql)
    body = await gql.query(
        "mutation($input: RecordOperationInput!) { recordOperation(input: $input) { applied } }",
        {
            "input": KEY
            | {"leaseToken": "lease-A", "version": 0, "fromState": "ATTEMPTED"}
            | {"toState": "ATTEMPTED", "httpStatus": 99999}
        },
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "httpStatus"


async def test_ids_and_cursors__deeply_nested_json_refused(gql):
    nested = "[1," + "[" * 100_000 + "]" * 100_000 + "]"
    opaque = base64.urlsafe_b64encode(nested.encode()).decode()
    page = await gql.query(
        "query($after: String) { operations(after: $after) { edges { cursor } } }",
        {"after": opaque},
    )
    assert error_codes(page) == ["BAD_USER_INPUT"]
    node = await gql.query("query($id: ID!) { node(id: $id) { id } }", {"id": opaque})
    assert error_codes(node) == ["NOT_FOUND"]


async def test_claim__deeply_nested_reissue_intent_refused(gql):
    intent: Any = "x"
    for _ in range(300):
        intent = [intent]
    body = await gql.query(
        "mutation($input: ClaimOperationInput!) { claimOperation(input: $input) { __typename } }",
        {"input": claim_input(reissueIntent=intent)},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["extensions"]["field"] == "reissueIntent"
    assert await count_operations(gql) == 0


async def test_operations__more_than_10000_document_ids_refused(gql):
    body = await gql.query(
        "query($ids: [String!]) { operations(filter: {documentIDs: $ids}) { edges { cursor } } }",
        {"ids": [f"doc-{n}" for n in range(10_001)]},
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    # A list bound to a variable is named by the variable, as its bad items are (ids[3]).
    assert body["errors"][0]["extensions"]["field"] == "ids"
