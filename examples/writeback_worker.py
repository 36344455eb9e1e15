"""A connector write-back worker, end to end, against a running connector-store server.

    .venv/bin/connector-store serve                      # in one terminal
    .venv/bin/python examples/writeback_worker.py --operations 10

The worker speaks only GraphQL over HTTP (httpx); its client, fake provider and tally are
in ``writeback_parts.py``, its verifier and sync checkpoint in ``writeback_verifier.py``. It
sends the documents of ``graphql/operations/worker.graphql`` and ``verifier.graphql``: the
whole file holding the named operation every time, with an ``operationName`` picking the
document to run. The external provider (a calendar) is simulated in process by
``FakeProvider``, a dict.

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
import os
import secrets
import sys
import time
from typing import Any

import httpx
from writeback_parts import (
    LEASE_MS,
    RETRY_AFTER_MS,
    RETRY_DEADLINE_S,
    SYNC_CONNECTOR,
    VERIFY_AFTER_MS,
    Change,
    Client,
    FakeProvider,
    GraphQLError,
    Subscription,
    Tally,
    TransientProviderError,
)
from writeback_verifier import SyncConflict, Verifier, advance_sync_state, iso_time


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
