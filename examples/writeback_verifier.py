"""The verifier loop and the sync checkpoint of ``writeback_worker.py``: ``Verifier`` checks,
through the watches finalize armed, that the provider holds each document's winner and
repairs what does not match; ``advance_sync_state`` moves the connector's sync checkpoint by
one compare-and-swap, recomputing on a conflict."""

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from writeback_parts import (
    CLAIM_MS,
    MAX_VERIFY_ATTEMPTS,
    POLL_INTERVAL_S,
    RETRY_DEADLINE_S,
    REVERIFY_AFTER_MS,
    SYNC_ATTEMPTS,
    Change,
    Client,
    FakeProvider,
    Tally,
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
