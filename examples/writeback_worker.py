"""A connector write-back worker, end to end, against a running connector-store server.

    .venv/bin/connector-store serve                      # in one terminal
    .venv/bin/python examples/writeback_worker.py --operations 10

The worker speaks only GraphQL over HTTP (httpx). It sends the documents of
``graphql/operations/worker.graphql`` and ``verifier.graphql``: the whole file holding the
named operation every time, with an ``operationName`` picking the document to run. The
external provider (a calendar) is simulated in process by ``FakeProvider``, a dict.

The life of a batch of operations, one request per step for the whole batch (each item of
a batch is its own compare-and-set with the single mutation's outcome, in input order):

1. ``ServerTime``: the server's clock. Lease expiries and schedules are computed from it,
   never from this machine's clock, so a skewed worker cannot steal or lose leases.
2. ``ClaimOperations``: claim each key ``(callerDID, operationID)`` with the change's
   immutable envelope (owner, connector, model, op, account, target, source, deterministic
   event id, payload hash) and a lease (``leaseToken`` until ``leaseExpiresAt``). Four
   answers per item: ``OperationClaimed`` (the key was free: the operation is ours and we
   hold its lease), ``OperationExists`` (the same envelope was claimed before: a replay,
   e.g. a redelivered queue message; the stored operation says how far it got),
   ``OperationConflict`` (the key holds a different envelope: a bug upstream; the stored
   operation is never overwritten), ``OperationCollected`` (a replay of a key whose
   operation finished and was collected, within the idempotency window: nothing to send).
   A claim keeps its lease only where leasing would grant it (the account below its cap and
   not throttled, no other write of the provider entity in flight); otherwise the operation
   is claimed with its lease already lapsed, for ``LeaseOperations`` to hand out.
3. ``RenewLeases``: the heartbeat, before a batch is sent: it extends the leases this run
   holds and has not let lapse, and answers which those are; the others are left for
   ``LeaseOperations``. ``MarkSendsStarted``: before calling the provider, record that this
   run is sending. When a crashed run's marker is still there, the attempt becomes
   contested: it may have reached the provider, so no run can refund it.
4. Send each to the provider, idempotently: the provider keys the write by the
   ``deterministicEventID``, so a repeated send updates rather than duplicates.
5. ``FinalizeOperations``: compare-and-set each sent operation (its ``version`` and our
   ``leaseToken``) to COMMITTED, storing the provider's entity and etag. The same
   transaction arms the verify/repair watch of each provider entity, due at ``dueAt``.

When the provider fails transiently (one operation of each run does, on its first send):

3'. ``RecordOperations`` ATTEMPTED -> ATTEMPTED with ``kind: "transient"`` and
    ``nextAttemptAt = serverTime + 1500`` for the failed ones: the attempt is counted and
    the operation rescheduled. Then ``ReleaseLeases`` in one request, so any worker may take
    them when due.
4'. ``LeaseOperations`` (a fresh token, ``leaseMs``, no clock of ours): the server
    leases, fairly and within each account's cap, the due operations whose lease is free;
    then steps 3 to 5 again for the batch it handed out. The failed one ends COMMITTED with
    2 attempts (the others with 1). Between leases the worker does not poll: it waits on
    the ``WorkAvailable`` subscription (``graphql/operations/live.graphql``, over HTTP with
    Apollo's multipart protocol, so httpx suffices), which signals once at once and then
    each time work may have become leasable for its connector: here, when the rescheduled
    operation comes due. After each signal it leases until nothing is handed out.

Before writing a change back, the worker records the document's new state as its winner
(``RecordIngress`` with the digest of the payload; no watch exists yet, so it arms nothing).

After the write-backs, the verifier (``Verifier``) checks that the provider holds each
document's winner, through the watches finalize armed: ``ClaimWatches`` claims a batch of
due watches, the verifier reads each provider entity (its digest), and
``RecordVerifications`` records every check in one request. A mismatch is repaired by
writing the document again. One entity (the last change's) is one the provider keeps
mangling, so its watch ends REPAIR_FAILED after ``MAX_VERIFY_ATTEMPTS`` checks. Then two
documents are edited (``RecordIngress`` with a new digest): each VERIFIED watch opens a new
repair generation, the next check finds the provider stale, the repair rewrites it, and the
check after that ends VERIFIED. The summary prints how many watches ended VERIFIED, how many
repairs ingress opened, and how many ended REPAIR_FAILED.

Each run also replays one claim with the identical envelope (expects ``OperationExists``)
and claims an existing key with a drifted ``payloadHash`` (expects ``OperationConflict``),
then re-reads every operation with ``GetOperation``. It prints a summary and exits 1 when
any expectation failed, 2 when the server could not be used at all.

At the end of a run the worker advances its sync checkpoint (``graphql/operations/sync.graphql``)
with ``advance_sync_state``: read ``GetSyncState``, recompute the checkpoint from what was
read (here: add the run's committed count), and ``UpdateSyncProgress`` with the ``version``
and ``incarnation`` read (both null when there was no state yet). That mutation is one
compare-and-swap: when another writer got there first it answers ``applied: false`` with the
state as it now stands, and the loop recomputes from that and tries again. The checkpoint is
kept under a stable connector name, so each run adds to what the runs before it left.

Every run uses fresh ids (a random run id in each operation id and in the connector name),
so it can run again and again against the same database, and ``LeaseOperations`` and
``ClaimWatches`` filtered by that connector name hand out only this run's work. A production
worker would use one stable connector name and take every due operation, including those a
crashed run left behind.
"""

import argparse
import hashlib
import json
import os
import re
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

OPERATIONS_DIR = Path(__file__).resolve().parent.parent / "graphql" / "operations"
DOCUMENTS = [
    OPERATIONS_DIR / "worker.graphql",
    OPERATIONS_DIR / "verifier.graphql",
    OPERATIONS_DIR / "sync.graphql",
    OPERATIONS_DIR / "live.graphql",
]
MULTIPART = 'multipart/mixed;subscriptionSpec="1.0"'
"""The ``Accept`` header asking for a subscription over HTTP (Apollo's multipart protocol)."""
SYNC_CONNECTOR = "example-calendar"
"""The sync checkpoint's connector name: stable across runs, unlike the per-run one."""
SYNC_ATTEMPTS = 20

LEASE_MS = 30_000
"""How long a lease lasts. A worker that dies holding one blocks the operation this long."""
RETRY_AFTER_MS = 1_500
"""How long a transient failure waits before the operation is due again."""
VERIFY_AFTER_MS = 200
"""When the verifier should first check that the provider holds what we wrote (short, so
the example's verifier finds its watches due within a poll or two)."""
REVERIFY_AFTER_MS = 100
"""When a watch whose check found a mismatch (and whose entity was repaired) is due again."""
MAX_VERIFY_ATTEMPTS = 3
"""Mismatches a watch may see before it ends REPAIR_FAILED."""
CLAIM_MS = 10_000
"""How long a verifier's claim on a watch lasts."""
POLL_INTERVAL_S = 0.2
RETRY_DEADLINE_S = 30.0


class GraphQLError(Exception):
    """The server answered with ``errors`` (invalid input, missing rights, a bug)."""


class TransientProviderError(Exception):
    """The provider failed in a way worth retrying (a 503, a timeout)."""

    http_status = 503


class Client:
    """Posts the documents of ``worker.graphql``, ``verifier.graphql`` and ``sync.graphql``
    by name (each request sends the whole file holding the named operation); returns
    ``data`` or raises."""

    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(timeout=10.0, headers=headers)
        self.url = url
        self.documents: dict[str, str] = {}
        for path in DOCUMENTS:
            text = path.read_text()
            for name in re.findall(r"^(?:query|mutation|subscription) (\w+)", text, re.MULTILINE):
                self.documents[name] = text

    def call(self, operation_name: str, **variables: Any) -> dict[str, Any]:
        response = self.http.post(
            self.url,
            json={
                "query": self.documents[operation_name],
                "operationName": operation_name,
                "variables": variables,
            },
        )
        body = response.json() if response.content else {}
        if body.get("errors") or response.status_code != 200:
            raise GraphQLError(
                f"{operation_name}: HTTP {response.status_code} {json.dumps(body)[:500]}"
            )
        return body["data"]

    def server_time(self) -> int:
        return self.call("ServerTime")["serverTime"]

    def subscribe(self, operation_name: str, **variables: Any) -> "Subscription":
        """A subscription over HTTP (Apollo's multipart protocol) on this client's
        connection settings."""
        return Subscription(self, operation_name, variables)

    def close(self) -> None:
        self.http.close()


class Subscription:
    """One subscription as a multipart HTTP response: ``next`` blocks until its next result
    (skipping the heartbeats the server sends every few seconds) and returns ``data``."""

    def __init__(self, client: Client, operation_name: str, variables: dict[str, Any]) -> None:
        self.stream = client.http.stream(
            "POST",
            client.url,
            json={
                "query": client.documents[operation_name],
                "operationName": operation_name,
                "variables": variables,
            },
            headers={"Accept": MULTIPART},
        )
        response = self.stream.__enter__()
        if response.status_code != 200:
            response.read()
            self.close()
            raise GraphQLError(f"{operation_name}: HTTP {response.status_code} {response.text}")
        self.name = operation_name
        self.parts = multipart_parts(response.iter_bytes())

    def next(self) -> dict[str, Any]:
        for part in self.parts:
            payload = part.get("payload")
            if payload is None:
                continue
            if payload.get("errors"):
                raise GraphQLError(f"{self.name}: {json.dumps(payload)[:500]}")
            return payload["data"]
        raise GraphQLError(f"{self.name}: the server ended the subscription")

    def close(self) -> None:
        self.stream.__exit__(None, None, None)


def multipart_parts(chunks: Any) -> Any:
    """The JSON bodies of a multipart response's parts, as they arrive (each part says its
    ``Content-Length``)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while (end := buffer.find(b"\r\n\r\n")) >= 0:
            found = re.search(rb"content-length: *(\d+)", buffer[:end], re.IGNORECASE)
            if found is None:
                buffer = buffer[end + 4 :]
                continue
            start = end + 4
            length = int(found.group(1))
            if len(buffer) < start + length:
                break
            yield json.loads(buffer[start : start + length])
            buffer = buffer[start + length :]


def state_digest(payload: dict[str, Any]) -> str:
    """The digest of a document state: what the store records as a document's winner, and
    what the verifier computes from the provider's entity to compare with it."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


class FakeProvider:
    """The external provider: entities in a dict, keyed by the write's idempotency key.

    ``flaky`` holds the idempotency keys whose first send fails transiently. ``garbled``
    holds the keys whose entity the provider keeps mangling on read (a field it rewrites),
    so no check or repair of it ever matches: that watch ends REPAIR_FAILED.
    """

    def __init__(self, flaky: set[str], garbled: set[str] | None = None) -> None:
        self.entities: dict[str, dict[str, Any]] = {}
        self.payloads: dict[str, dict[str, Any]] = {}
        self.flaky = set(flaky)
        self.garbled = set(garbled or ())

    def read_digest(self, idempotency_key: str) -> str | None:
        """The digest of what the provider holds for the key (None: nothing)."""
        payload = self.payloads.get(idempotency_key)
        if payload is None:
            return None
        if idempotency_key in self.garbled:
            payload = payload | {"title": payload["title"].upper() + " (provider copy)"}
        return state_digest(payload)

    def upsert(self, idempotency_key: str, payload: dict[str, Any]) -> dict[str, Any]:
        if idempotency_key in self.flaky:
            self.flaky.discard(idempotency_key)
            raise TransientProviderError("503 Service Unavailable")
        previous = self.entities.get(idempotency_key)
        entity = {
            "id": previous["id"] if previous else f"evt_{secrets.token_hex(6)}",
            "etag": secrets.token_hex(8),
            **payload,
        }
        self.entities[idempotency_key] = entity
        self.payloads[idempotency_key] = dict(payload)
        return entity


@dataclass(frozen=True)
class Change:
    """A document change to write back: one calendar event to create in the provider.

    ``edits`` counts later edits of the document (ingress) after the write-back.
    """

    run_id: str
    index: int
    edits: int = 0

    @property
    def operation_id(self) -> str:
        return f"{self.run_id}-op-{self.index}"

    @property
    def document_id(self) -> str:
        return f"doc-{self.run_id}-{self.index}"

    @property
    def event_id(self) -> str:
        """Derived from the document's change, not from the attempt: stable across retries."""
        return f"{self.document_id}@v1"

    @property
    def payload(self) -> dict[str, Any]:
        title = f"Meeting {self.index}" + (f" (edit {self.edits})" if self.edits else "")
        return {"title": title, "start": "2030-01-01T09:00:00Z"}

    @property
    def payload_hash(self) -> str:
        return state_digest(self.payload)


@dataclass
class Tally:
    committed: int = 0
    retries: int = 0
    wake_ups: int = 0
    """Times the worker waited on ``WorkAvailable`` for work (instead of polling)."""
    exists: int = 0
    conflicts: int = 0
    checks: int = 0
    ingress_opened: int = 0
    verified: int = 0
    repair_failed: int = 0
    failures: list[str] = field(default_factory=list)

    def expect(self, condition: bool, what: str) -> bool:
        if not condition:
            self.failures.append(what)
        return condition


class Worker:
    """Drives changes in batches through claimOperations -> markSendsStarted -> send ->
    finalizeOperations (or recordOperations for a transient failure)."""

    CALLER = "did:example:writeback-worker"
    OWNER = "did:example:alice"

    def __init__(self, client: Client, provider: FakeProvider, run_id: str) -> None:
        self.client = client
        self.provider = provider
        self.run_id = run_id
        self.connector = f"example-calendar-{run_id}"
        self.tally = Tally()
        self.waiting: dict[str, int] = {}
        """operationID -> when it is due (nextAttemptAt; 0: at once), for the operations
        waiting for ``LeaseOperations``: a retry, or a claim whose lease was not granted."""

    def claim_input(self, change: Change, lease_token: str, lease_expires_at: int) -> dict:
        return {
            "callerDID": self.CALLER,
            "operationID": change.operation_id,
            "ownerDID": self.OWNER,
            "connectorName": self.connector,
            "model": "CalendarEvent",
            "op": "create",
            "accountKey": "alice@example.com",
            "target": "calendars/primary",
            "sourceID": change.document_id,
            "deterministicEventID": change.event_id,
            "payloadHash": change.payload_hash,
            "leaseToken": lease_token,
            "leaseExpiresAt": lease_expires_at,
            "documentID": change.document_id,
        }

    def claim(self, change: Change, **drift: str) -> dict[str, Any]:
        """Claim ``change`` (with ``drift`` overriding envelope fields, to show a conflict)."""
        lease_token = secrets.token_hex(8)
        expires = self.client.server_time() + LEASE_MS
        claim = self.claim_input(change, lease_token, expires) | drift
        result = self.client.call("ClaimOperation", input=claim)["claimOperation"]
        result["leaseToken"] = lease_token
        return result

    def write_back(self, changes: list[Change]) -> None:
        """Record each document's new state as its winner, then claim every change in one
        request and settle the batch (write back, or reschedule on a transient error)."""
        for change in changes:
            ingress = self.client.call(
                "RecordIngress",
                input={"documentID": change.document_id, "winnerDigest": change.payload_hash},
            )["recordIngress"]
            self.tally.expect(
                ingress["results"] == [],
                f"{change.document_id}: a fresh document already has a watch",
            )
        lease_token = secrets.token_hex(8)
        expires = self.client.server_time() + LEASE_MS
        claims = [self.claim_input(change, lease_token, expires) for change in changes]
        results = self.client.call("ClaimOperations", input={"items": claims})["claimOperations"]
        leased = []
        for change, claimed in zip(changes, results["results"], strict=True):
            if self.tally.expect(
                claimed["__typename"] == "OperationClaimed",
                f"{change.operation_id}: first claim answered {claimed['__typename']}",
            ):
                leased.append((change, claimed["operation"]))
        self.settle(leased, lease_token)

    def key(self, change: Change) -> dict[str, str]:
        return {"callerDID": self.CALLER, "operationID": change.operation_id}

    def heartbeat(self, leased: list[tuple[Change, dict]], lease_token: str) -> list:
        """Renew the leases ``lease_token`` holds on ``leased`` in one request; keep those
        renewed, and leave the rest (a lease not granted, or lapsed) to ``LeaseOperations``."""
        renewed = self.client.call(
            "RenewLeases",
            input={
                "leaseToken": lease_token,
                "leaseMs": LEASE_MS,
                "keys": [self.key(change) for change, _ in leased],
            },
        )["renewLeases"]["renewed"]
        held = {operation["operationID"] for operation in renewed}
        for change, _ in leased:
            if change.operation_id not in held:
                self.waiting[change.operation_id] = 0
        return [(change, operation) for change, operation in leased if change.operation_id in held]

    def settle(self, leased: list[tuple[Change, dict]], lease_token: str) -> None:
        """Steps 3 to 5 for operations claimed or leased with ``lease_token``, a request per
        step for the whole batch: renew the leases still held, mark every send, send each,
        then finalize the sent ones and reschedule the failed ones."""
        if not leased:
            return
        leased = self.heartbeat(leased, lease_token)
        if not leased:
            return
        marker = f"{self.run_id}/{lease_token}"
        marks = [
            {
                "callerDID": self.CALLER,
                "operationID": change.operation_id,
                "leaseToken": lease_token,
                "marker": marker,
            }
            for change, _ in leased
        ]
        marked = self.client.call("MarkSendsStarted", input={"items": marks})["markSendsStarted"]
        sent: list[tuple[Change, dict, dict]] = []
        failed: list[tuple[Change, dict, TransientProviderError]] = []
        for (change, _), result in zip(leased, marked["results"], strict=True):
            if not self.tally.expect(result["applied"], f"{change.operation_id}: mark not applied"):
                continue
            try:
                entity = self.provider.upsert(change.event_id, change.payload)
            except TransientProviderError as error:
                failed.append((change, result["operation"], error))
                continue
            sent.append((change, result["operation"], entity))
        now = self.client.server_time()
        if sent:
            self.finalize(sent, lease_token, now)
        if failed:
            self.reschedule(failed, lease_token, now)

    def finalize(self, sent: list[tuple[Change, dict, dict]], lease_token: str, now: int) -> None:
        """Commit the sent operations in one request (each arms its entity's watch)."""
        finals = [
            {
                "callerDID": self.CALLER,
                "operationID": change.operation_id,
                "version": operation["version"],
                "leaseToken": lease_token,
                "dueAt": now + VERIFY_AFTER_MS,
                "resultEntity": entity,
                "providerEtag": entity["etag"],
                "documentID": change.document_id,
            }
            for change, operation, entity in sent
        ]
        done = self.client.call("FinalizeOperations", input={"items": finals})
        for (change, _, _), result in zip(sent, done["finalizeOperations"]["results"], strict=True):
            if self.tally.expect(result["applied"], f"{change.operation_id}: finalize refused"):
                self.tally.committed += 1

    def reschedule(
        self,
        failed: list[tuple[Change, dict, TransientProviderError]],
        lease_token: str,
        now: int,
    ) -> None:
        """Count the failed attempts and schedule the next ones in one request, then let go
        of each lease."""
        next_attempt_at = now + RETRY_AFTER_MS
        records = [
            {
                "callerDID": self.CALLER,
                "operationID": change.operation_id,
                "fromState": "ATTEMPTED",
                "toState": "ATTEMPTED",
                "version": operation["version"],
                "leaseToken": lease_token,
                "kind": "transient",
                "httpStatus": error.http_status,
                "nextAttemptAt": next_attempt_at,
            }
            for change, operation, error in failed
        ]
        recorded = self.client.call("RecordOperations", input={"items": records})
        applied = [
            change
            for (change, _, _), result in zip(
                failed, recorded["recordOperations"]["results"], strict=True
            )
            if self.tally.expect(result["applied"], f"{change.operation_id}: record refused")
        ]
        if not applied:
            return
        released = self.client.call(
            "ReleaseLeases",
            input={"leaseToken": lease_token, "keys": [self.key(change) for change in applied]},
        )["releaseLeases"]["released"]
        let_go = {operation["operationID"] for operation in released}
        for change in applied:
            self.tally.expect(
                change.operation_id in let_go, f"{change.operation_id}: release refused"
            )
            self.waiting[change.operation_id] = next_attempt_at
            self.tally.retries += 1

    def lease_due(self, changes: dict[str, Change]) -> None:
        """Lease until every waiting operation was leased and settled: after each
        ``WorkAvailable`` signal, ``LeaseOperations`` until it hands out nothing."""
        signals = self.client.subscribe("WorkAvailable", connectorName=self.connector)
        try:
            signals.next()
            self.lease_signalled(changes, signals)
        finally:
            signals.close()

    def lease_signalled(self, changes: dict[str, Change], signals: "Subscription") -> None:
        deadline = time.monotonic() + RETRY_DEADLINE_S
        while self.waiting and time.monotonic() < deadline:
            lease_token = secrets.token_hex(8)
            leased = self.client.call(
                "LeaseOperations",
                input={
                    "leaseToken": lease_token,
                    "leaseMs": LEASE_MS,
                    "limit": 50,
                    "connectorName": self.connector,
                },
            )["leaseOperations"]["operations"]
            if leased:
                now = self.client.server_time()
            batch = []
            for operation in leased:
                operation_id = operation["operationID"]
                due_at = self.waiting.pop(operation_id, None)
                if self.tally.expect(due_at is not None, f"{operation_id}: leased, not waiting"):
                    self.tally.expect(
                        now >= due_at,
                        f"{operation_id}: leased at {now}, before it was due {due_at}",
                    )
                    batch.append((changes[operation_id], operation))
            self.settle(batch, lease_token)
            if self.waiting and not leased:
                self.tally.wake_ups += 1
                signals.next()
        for operation_id in self.waiting:
            self.tally.failures.append(f"{operation_id}: never leased")

    def replay(self, change: Change) -> None:
        """A redelivered change: same key, same envelope -> the stored operation."""
        result = self.claim(change)
        if self.tally.expect(
            result["__typename"] == "OperationExists",
            f"{change.operation_id}: replayed claim answered {result['__typename']}",
        ):
            self.tally.exists += 1

    def conflict(self, change: Change) -> None:
        """Same key, a drifted payload: refused, the stored operation untouched."""
        result = self.claim(change, payloadHash=change.payload_hash + "-drifted")
        if self.tally.expect(
            result["__typename"] == "OperationConflict",
            f"{change.operation_id}: drifted claim answered {result['__typename']}",
        ):
            self.tally.conflicts += 1

    def verify(self, change: Change, attempts: int) -> None:
        """Re-read the operation: committed, with the expected attempts and the provider's etag."""
        operation = self.client.call(
            "GetOperation", callerDID=self.CALLER, operationID=change.operation_id
        )["operation"]
        name = change.operation_id
        if not self.tally.expect(operation is not None, f"{name}: not found"):
            return
        self.tally.expect(operation["state"] == "COMMITTED", f"{name}: {operation['state']}")
        self.tally.expect(
            operation["attempts"] == attempts,
            f"{name}: {operation['attempts']} attempts, expected {attempts}",
        )
        entity = self.provider.entities.get(change.event_id)
        self.tally.expect(
            entity is not None and operation["providerEtag"] == entity["etag"],
            f"{name}: providerEtag {operation['providerEtag']!r} is not the provider's",
        )


class Verifier:
    """Checks that the provider holds each document's current winner, through the watches
    that finalize armed, and repairs what does not match.

    ``ClaimWatches`` claims a batch of due watches (so two verifiers never check one watch at
    once); for each, read the provider's entity and compute its digest; then
    ``RecordVerifications`` records every digest in one request. The server compares each
    with the document's winner: VERIFIED, or PENDING (a mismatch: the verifier repairs by
    writing the document's current state to the provider again, and the watch is due again
    shortly), or REPAIR_FAILED after ``MAX_VERIFY_ATTEMPTS`` mismatches. ``RecordIngress``
    models a document edited after its write-back: the winner moves, and a VERIFIED watch
    opens a new repair generation (counted as a repair opened by ingress).
    """

    IDENTITY_FIELDS = ("ownerDID", "connectorName", "model", "accountKey", "sourceID")

    def __init__(
        self,
        client: Client,
        provider: FakeProvider,
        connector: str,
        changes: list[Change],
        tally: Tally,
    ) -> None:
        self.client = client
        self.provider = provider
        self.connector = connector
        self.tally = tally
        self.documents = {change.document_id: change for change in changes}
        """documentID -> the document's current state."""

    def settle(self) -> None:
        """Check due watches until no watch of this connector is pending verification."""
        deadline = time.monotonic() + RETRY_DEADLINE_S
        while time.monotonic() < deadline:
            claimed = self.client.call(
                "ClaimWatches",
                input={"claimMs": CLAIM_MS, "limit": 50, "connectorName": self.connector},
            )["claimWatches"]["watches"]
            if claimed:
                self.check(claimed, self.client.server_time())
                continue
            if not self.any_pending():
                return
            time.sleep(POLL_INTERVAL_S)
        self.tally.failures.append("verifier: watches still pending at the deadline")

    def any_pending(self) -> bool:
        page = self.client.call(
            "WatchesPage",
            filter={"connectorName": self.connector, "status": "PENDING_VERIFICATION"},
            first=1,
        )
        return bool(page["watches"]["edges"])

    def check(self, claimed: list[dict[str, Any]], now: int) -> None:
        """Compare the provider with the winner of each claimed watch, record every check in
        one request, and repair each mismatch."""
        changes = [self.documents[watch["documentID"]] for watch in claimed]
        items = [
            {
                "identity": {name: watch[name] for name in self.IDENTITY_FIELDS},
                "generation": watch["repairGeneration"],
                "fetchedDigest": self.provider.read_digest(change.event_id),
                "maxAttempts": MAX_VERIFY_ATTEMPTS,
                "dueAt": now + REVERIFY_AFTER_MS,
                "claimedUntil": watch["claimedUntil"],
            }
            for watch, change in zip(claimed, changes, strict=True)
        ]
        self.tally.checks += len(items)
        results = self.client.call("RecordVerifications", input={"items": items})[
            "recordVerifications"
        ]["results"]
        for change, result in zip(changes, results, strict=True):
            if result["outcome"] == "PENDING":
                self.provider.upsert(change.event_id, change.payload)

    def edit(self, change: Change) -> None:
        """The document is edited after its write-back: record the new winner (ingress)."""
        edited = replace(change, edits=change.edits + 1)
        self.documents[change.document_id] = edited
        ingress = {"documentID": edited.document_id, "winnerDigest": edited.payload_hash}
        results = self.client.call(
            "RecordIngress", input=ingress | {"dueAt": self.client.server_time()}
        )["recordIngress"]["results"]
        outcomes = [result["outcome"] for result in results]
        if self.tally.expect(
            outcomes == ["OPENED"], f"{change.document_id}: ingress answered {outcomes}"
        ):
            self.tally.ingress_opened += 1
        again = self.client.call("RecordIngress", input=ingress)["recordIngress"]["results"]
        self.tally.expect(
            [result["outcome"] for result in again] == ["NOOP"],
            f"{change.document_id}: a repeated ingress was not a no-op",
        )

    def count_outcomes(self) -> None:
        """How this connector's watches ended."""
        page = self.client.call("WatchesPage", filter={"connectorName": self.connector}, first=500)[
            "watches"
        ]
        statuses = [edge["node"]["verificationStatus"] for edge in page["edges"]]
        self.tally.verified = statuses.count("VERIFIED")
        self.tally.repair_failed = statuses.count("REPAIR_FAILED")
        self.tally.expect(
            len(statuses) == len(self.documents),
            f"{len(statuses)} watches for {len(self.documents)} documents",
        )


class SyncConflict(Exception):
    """Other writers kept moving the sync state: the CAS never applied."""


def iso_time(epoch_ms: int) -> str:
    """Epoch ms as the ISO-8601 text the sync state keeps (``2030-01-01T09:00:00.000Z``)."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def advance_sync_state(
    client: Client,
    connector_name: str,
    owner_did: str,
    recompute: Callable[[dict[str, Any] | None], dict[str, Any]],
    attempts: int = SYNC_ATTEMPTS,
) -> dict[str, Any]:
    """Advance a sync state by read -> recompute -> compare-and-swap, retrying on a refusal.

    ``recompute`` gets the state as read (None when there is none) and returns the new
    progress: ``checkpoint``, ``lastSyncedAt``, ``entityCount`` (and optionally ``error``,
    ``recovery``). It may run more than once, so it must compute from its argument only.
    Returns the state written; raises ``SyncConflict`` after ``attempts`` refusals.
    """
    key = {"connectorName": connector_name, "ownerDID": owner_did}
    current = client.call("GetSyncState", **key)["syncState"]
    for _ in range(attempts):
        guard = {
            "version": None if current is None else current["version"],
            "incarnation": None if current is None else current["incarnation"],
        }
        result = client.call("UpdateSyncProgress", input=key | recompute(current) | guard)[
            "updateSyncProgress"
        ]
        if result["applied"]:
            return result["syncState"]
        current = result["syncState"]
    raise SyncConflict(f"{connector_name}/{owner_did}: not applied after {attempts} attempts")


def record_sync(client: Client, committed: int, now: int) -> dict[str, Any]:
    """Add this run's ``committed`` count to the example's sync checkpoint."""

    def recompute(current: dict[str, Any] | None) -> dict[str, Any]:
        before = 0 if current is None else current["checkpoint"]["committed"]
        return {
            "checkpoint": {"committed": before + committed},
            "lastSyncedAt": iso_time(now),
            "entityCount": before + committed,
        }

    return advance_sync_state(client, SYNC_CONNECTOR, Worker.OWNER, recompute)


def run(url: str, count: int, token: str | None) -> int:
    run_id = secrets.token_hex(4)
    changes = {change.operation_id: change for change in (Change(run_id, i) for i in range(count))}
    ordered = list(changes.values())
    flaky, garbled = ordered[0], ordered[-1]
    edited = [change for change in ordered if change is not garbled][:2]
    provider = FakeProvider(flaky={flaky.event_id}, garbled={garbled.event_id})
    client = Client(url, token)
    worker = Worker(client, provider, run_id)
    verifier = Verifier(client, provider, worker.connector, ordered, worker.tally)
    started = time.perf_counter()
    try:
        worker.write_back(ordered)
        last = ordered[-1]
        worker.replay(last)
        worker.conflict(last)
        worker.lease_due(changes)
        elapsed = time.perf_counter() - started
        for change in ordered:
            worker.verify(change, attempts=2 if change is flaky else 1)
        verifier.settle()
        for change in edited:
            verifier.edit(change)
        verifier.settle()
        verifier.count_outcomes()
        synced = record_sync(client, worker.tally.committed, client.server_time())
    except (httpx.HTTPError, GraphQLError, SyncConflict, ValueError) as error:
        print(f"error: cannot use the server at {url}: {error}", file=sys.stderr)
        return 2
    finally:
        client.close()
    tally = worker.tally
    tally.expect(tally.committed == count, f"{tally.committed} of {count} committed")
    tally.expect(tally.retries == 1, f"{tally.retries} retries, expected 1")
    tally.expect(tally.verified == count - 1, f"{tally.verified} verified, expected {count - 1}")
    tally.expect(tally.repair_failed == 1, f"{tally.repair_failed} repair failed, expected 1")
    tally.expect(
        tally.ingress_opened == len(edited),
        f"{tally.ingress_opened} repairs opened by ingress, expected {len(edited)}",
    )
    print(f"run: {run_id}")
    print(f"server: {url}")
    print(f"operations: {count}")
    print(f"committed: {tally.committed}/{count}")
    print(f"retries: {tally.retries}")
    print(f"wake-ups waited for: {tally.wake_ups}")
    print(f"exists: {tally.exists}")
    print(f"conflicts: {tally.conflicts}")
    print(
        f"sync: {SYNC_CONNECTOR} committed {synced['checkpoint']['committed']}, "
        f"version {synced['version']}, lastSyncedAt {synced['lastSyncedAt']}"
    )
    print(f"elapsed: {elapsed:.2f} s")
    print(f"throughput: {tally.committed / elapsed:.1f} ops/s")
    print(f"verification checks: {tally.checks}")
    print(f"watches verified: {tally.verified}")
    print(f"repairs opened by ingress: {tally.ingress_opened}")
    print(f"watches repair failed: {tally.repair_failed}")
    print(f"result: {'FAILED' if tally.failures else 'OK'}")
    for failure in tally.failures:
        print(f"expectation failed: {failure}", file=sys.stderr)
    return 1 if tally.failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/graphql", help="GraphQL endpoint")
    parser.add_argument("--operations", type=int, default=10, help="operations to write back")
    parser.add_argument(
        "--token",
        default=os.environ.get("CONNECTOR_STORE_TOKEN"),
        help="a bearer token, when the server wants one (env CONNECTOR_STORE_TOKEN)",
    )
    args = parser.parse_args()
    if args.operations < 1:
        parser.error("--operations must be at least 1")
    sys.exit(run(args.url, args.operations, args.token))


if __name__ == "__main__":
    main()
