"""How the ``Worker`` settles a batch: the outcomes its handler answered, in one request per
kind of settle, each sent until the server takes it (a finished write is never released for
another send), and the leases it still holds let go."""

import asyncio
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from connector_store_client import documents as doc
from connector_store_client.bounds import MAX_BODY_BYTES, MAX_THROTTLE_MS
from connector_store_client.client import Client, backoff_s
from connector_store_client.errors import (
    ConnectorStoreError,
    GraphQLResponseError,
    TransportError,
)
from connector_store_client.handler_errors import HANDLER_ERROR, HandlerRetries
from connector_store_client.models.finalize_operations import (
    FinalizeOperations,
    FinalizeOperationsFinalizeOperationsResults,
)
from connector_store_client.models.fragments import LeasedOperation as LeasedOperationFields
from connector_store_client.models.record_operations import (
    RecordOperations,
    RecordOperationsRecordOperationsResults,
)
from connector_store_client.outcomes import Committed, Failed, Outcome, RetryAfter

log = logging.getLogger("connector_store_client.worker")

REFUSED_CODES = frozenset({"UNAUTHENTICATED", "FORBIDDEN"})
"""Codes of an answer that refuses the worker's token itself: asking again with it is
refused again, so ``run`` stops and raises it rather than retrying forever (but for
``workAvailable`` and ``throttleAccount``, which the worker does without)."""


class LeasedOperation(LeasedOperationFields):
    """An operation leased to this worker, as the ``LeasedOperation`` fragment answers it (the
    model ariadne-codegen generates, snake_case fields): its key, envelope
    (``deterministic_event_id`` is the provider's idempotency key: send it with the write),
    ``attempts`` so far, ``version`` and ``lease_expires_at`` (epoch ms)."""

    @property
    def key(self) -> dict[str, str]:
        """The ``OperationKeyInput``."""
        return {"callerDID": self.caller_did, "operationID": self.operation_id}


@dataclass
class WorkerStats:
    """What a worker settled: operations committed, retried, failed and deferred; ``lost``:
    leased operations whose lease another token took before they were settled; ``released``:
    leases let go unsettled (on stop before the handler answered, or when the server refused
    a settle outright); ``refused``: outcomes the server refused, recorded as
    ``handler_error`` retries instead (and counted there); ``resent``: settles sent again
    after the server could not be reached (their outcomes kept, never released)."""

    committed: int = 0
    retried: int = 0
    failed: int = 0
    deferred: int = 0
    lost: int = 0
    released: int = 0
    refused: int = 0
    resent: int = 0


class Abandoned(TransportError):
    """A settle given up when the worker was stopped a second time while it waited for the
    server: its leases are left to lapse, not released."""


class BatchSettling:
    """The settling half of ``Worker`` (its base class): what it needs of the worker is set
    by ``Worker.__init__``."""

    client: Client
    stats: WorkerStats
    marker: str
    verify_delay_ms: int
    retries: HandlerRetries
    _stopping: asyncio.Event
    _abandoning: asyncio.Event
    _refused: GraphQLResponseError | None
    _throttling: bool

    def stop(self) -> None:
        """Lease no more; ``run`` returns once running batches are settled or released. A
        second ``stop()`` (a second SIGTERM or Ctrl-C) gives up the settles still waiting
        for an unreachable server: their leases lapse (not released: a lease released after
        a finished write would send it again at once)."""
        if self._stopping.is_set():
            self._abandoning.set()
        self._stopping.set()

    def _refuses_token(self, error: ConnectorStoreError) -> bool:
        """Whether ``error`` refuses the worker's token (``REFUSED_CODES``): then it stops."""
        if isinstance(error, GraphQLResponseError) and error.code in REFUSED_CODES:
            log.error("the server refuses this worker's token (%s): stopping", error)
            self._refused = error
            self._stopping.set()
            return True
        return False

    async def _persist(
        self,
        name: str,
        document: str,
        variables: dict[str, Any],
        *,
        until: asyncio.Event | None = None,
    ) -> dict[str, Any]:
        """Send ``document`` (a call safe to repeat) until the server answers it: after a
        lost answer or an error that wrote nothing (``SERVICE_UNAVAILABLE``, ``CONFLICT``)
        past the client's own retries, again after ``backoff_s``, counted in
        ``stats.resent``. Raises ``Abandoned`` when ``until`` is set meanwhile (None: the
        worker stopped twice), and the ``GraphQLResponseError`` of any other refusal."""
        until = until or self._abandoning
        failures = 0
        while True:
            try:
                return await self.client.execute(document, variables, repeatable=True)
            except TransportError as error:
                problem: ConnectorStoreError = error
            except GraphQLResponseError as error:
                if not error.repeatable:
                    raise
                problem = error
            failures += 1
            self.stats.resent += 1
            log.warning("%s failed (%s): kept, and sent again", name, problem)
            try:
                await asyncio.wait_for(until.wait(), timeout=backoff_s(min(failures, 6)))
            except TimeoutError:
                continue
            raise Abandoned(f"{name} was given up when the worker stopped")

    async def _settle(
        self,
        token: str,
        batch: list[LeasedOperation],
        outcomes: list[Outcome],
        leases: "BatchLeases",
    ) -> None:
        """Settle ``batch`` by its (sendable) ``outcomes``: throttles, then one
        ``finalizeOperations`` and one ``recordOperations`` (each sent until the server
        answers it: ``_persist``), then ``releaseLeases`` for what waits. An item the server
        refuses (``BAD_USER_INPUT`` naming ``items[i]``) is left out and the others sent
        again; a refused finalize is sent again without its result and etag (the provider
        took the write), and each other refused one is recorded as a ``handler_error``
        retry saying what was refused. ``leases`` keeps the leases the batch still holds: on
        return, none. Raises ``Abandoned``, or the ``ConnectorStoreError`` of a call the
        server refused otherwise."""
        finals: list[Settle] = []
        records: list[Settle] = []
        throttles: dict[tuple[str, str], int] = {}
        for operation, outcome in zip(batch, outcomes, strict=True):
            item = self._item(token, operation, outcome)
            (finals if item.state == "COMMITTED" else records).append(item)
            if isinstance(outcome, RetryAfter) and outcome.throttle_account:
                provider_account = (operation.connector_name, operation.account_key)
                throttles[provider_account] = max(
                    throttles.get(provider_account, 0), outcome.delay_ms
                )
        for (connector, account), delay in throttles.items():
            await self._throttle(connector, account, delay)
        refused_finals = await self._send(token, FINALIZE, finals, leases)
        # The provider took each of these writes: commit it without what was refused (its
        # result or etag) rather than retry it, which would send it again.
        for item, _ in refused_finals:
            log.error("%s is committed without its result and etag", item.operation.key)
        bare = [self._item(token, item.operation, Committed()) for item, _ in refused_finals]
        refused = await self._send(token, FINALIZE, bare, leases)
        refused += await self._send(token, RECORD, records, leases)
        self.stats.refused += len(refused_finals)
        if refused:
            self.stats.refused += len(refused)
            log.error("%d refused outcomes are retried", len(refused))
            retries = [
                self._item(
                    token,
                    item.operation,
                    self.retries.outcome(item.operation.attempts, HANDLER_ERROR, why),
                )
                for item, why in refused
            ]
            for item, why in await self._send(token, RECORD, retries, leases):
                log.error("the retry of %s was refused too (%s)", item.operation.key, why)
        await self._let_go(token, leases)

    def _item(self, token: str, operation: LeasedOperation, outcome: Outcome) -> "Settle":
        """The settle item of ``outcome`` for ``operation``: a ``FinalizeOperationInput``
        for ``Committed``, a ``RecordOperationInput`` for the others."""
        base = operation.key | {"version": operation.version, "leaseToken": token}
        if isinstance(outcome, Committed):
            fields = base | {
                "delayMs": self.verify_delay_ms,
                "resultEntity": outcome.result_entity,
                "providerEtag": outcome.provider_etag,
            }
            return Settle(operation, outcome, "COMMITTED", fields)
        record = base | {"fromState": "ATTEMPTED"}
        if isinstance(outcome, RetryAfter):
            fields = record | {
                "toState": "ATTEMPTED",
                "kind": outcome.kind,
                "httpStatus": outcome.http_status,
                "errorMessage": outcome.message,
                "delayMs": outcome.delay_ms,
                "sendMarker": self.marker,
            }
            return Settle(operation, outcome, "ATTEMPTED", fields)
        if isinstance(outcome, Failed):
            fields = record | {
                "toState": "FAILED",
                "kind": outcome.kind,
                "httpStatus": outcome.http_status,
                "errorMessage": outcome.message,
                "sendMarker": self.marker,
            }
            return Settle(operation, outcome, "FAILED", fields)
        fields = record | {
            "toState": "ATTEMPTED",
            "countAttempt": False,
            "deferReason": outcome.reason,
            "errorMessage": outcome.message,
            "delayMs": outcome.delay_ms,
        }
        return Settle(operation, outcome, "ATTEMPTED", fields)

    async def _send(
        self,
        token: str,
        mutation: "BatchSettle",
        items: list["Settle"],
        leases: "BatchLeases",
    ) -> list[tuple["Settle", str]]:
        """Send ``items`` in ``mutation``s (each until the server answers it: ``_persist``),
        one for each run of them within half the server's body bound (``within_body``); the
        items one refuses (``refused_items``) are left out and the others sent again.
        Returns each refused item with what was refused (the field and the server's
        message). Each item written leaves ``leases.unsettled``, and joins
        ``leases.waiting`` when it holds its lease still (a retry or deferral recorded).
        Raises ``Abandoned``, or the ``ConnectorStoreError`` of a call the server refused
        otherwise."""
        refused: list[tuple[Settle, str]] = []
        for chunk in within_body(items):
            pending = list(chunk)
            while pending:
                try:
                    data = await self._persist(
                        mutation.name,
                        mutation.document,
                        {"input": {"items": [item.fields for item in pending]}},
                    )
                except GraphQLResponseError as error:
                    named = refused_items(error, len(pending))
                    if not named:
                        raise
                    for index in sorted(named, reverse=True):
                        item = pending.pop(index)
                        why = (
                            f"{mutation.name} refused the handler's outcome {item.outcome!r:.300}: "
                        )
                        log.error("%s%s", why, named[index])
                        refused.append((item, why + named[index]))
                    continue
                results = mutation.results(data)
                counted = self._count(token, pending, results)
                for item, written in zip(pending, counted, strict=True):
                    operation = item.operation
                    del leases.unsettled[(operation.caller_did, operation.operation_id)]
                    if written and item.state == "ATTEMPTED":
                        leases.waiting.append(operation)
                break
        return refused

    def _count(
        self,
        token: str,
        sent: list["Settle"],
        results: Sequence[
            FinalizeOperationsFinalizeOperationsResults | RecordOperationsRecordOperationsResults
        ],
    ) -> list[bool]:
        """Count each of ``sent`` in ``stats`` by its ``results``; whether each was written
        (applied, or found written by this token after a lost answer)."""
        written = []
        for item, result in zip(sent, results, strict=True):
            stored = result.operation
            # A repeat after a lost answer finds its own write: the state written, the
            # version past the one it was sent with, the lease still this token's.
            own = (
                stored is not None
                and stored.state.value == item.state
                and stored.lease_token == token
                and stored.version > item.operation.version
            )
            written.append(result.applied or own)
            if not (result.applied or own):
                self.stats.lost += 1
            elif item.state == "COMMITTED":
                self.stats.committed += 1
            elif item.state == "FAILED":
                self.stats.failed += 1
            elif item.fields.get("countAttempt") is False:
                self.stats.deferred += 1
            else:
                self.stats.retried += 1
        return written

    async def _let_go(self, token: str, leases: "BatchLeases") -> None:
        """Release the leases ``leases`` holds (those of ``unsettled`` counted as
        ``released``), and empty it."""
        held = leases.waiting + list(leases.unsettled.values())
        if held:
            await self._release(token, held)
        self.stats.released += len(leases.unsettled)
        leases.unsettled.clear()
        leases.waiting.clear()

    async def _release(self, token: str, operations: list[LeasedOperation]) -> None:
        keys = [operation.key for operation in operations]
        try:
            await self.client.execute(
                doc.RELEASE_LEASES,
                {"input": {"leaseToken": token, "keys": keys}},
                repeatable=True,
            )
        except ConnectorStoreError as error:
            log.warning("releaseLeases failed (%s); the leases lapse in time", error)

    async def _throttle(self, connector: str, account: str, delay_ms: int) -> None:
        """``throttleAccount`` for ``delay_ms`` (1 to ``MAX_THROTTLE_MS``). A failure is
        logged, not raised: the retry is recorded all the same. Without ``operator`` (a
        ``FORBIDDEN`` answer) this worker throttles no more, saying so once."""
        if not self._throttling:
            return
        try:
            await self.client.execute(
                doc.THROTTLE_ACCOUNT,
                {
                    "input": {
                        "connectorName": connector,
                        "accountKey": account,
                        "retryAfterMs": min(max(delay_ms, 1), MAX_THROTTLE_MS),
                    }
                },
                repeatable=True,
            )
        except ConnectorStoreError as error:
            if lacks_scope(error):
                self._throttling = False
                log.warning(
                    "throttleAccount needs the operator scope, which this worker's token "
                    "lacks (%s): its 429 outcomes record their retries but throttle no account",
                    error,
                )
            else:
                log.warning("throttleAccount failed (%s); the retry is recorded without it", error)


@dataclass
class BatchLeases:
    """The leases a batch holds, by what became of their operations: ``unsettled``, by
    key, not settled yet; ``waiting``, settled to wait (a retry or a deferral recorded),
    their leases still to release."""

    unsettled: dict[tuple[str, str], LeasedOperation]
    waiting: list[LeasedOperation] = field(default_factory=list)


@dataclass(frozen=True)
class Settle:
    """One item of a batch settle: the ``operation``, the ``outcome`` it settles, the
    ``state`` it writes (``COMMITTED``, ``ATTEMPTED`` or ``FAILED``) and the item's
    ``fields`` (a ``FinalizeOperationInput`` or ``RecordOperationInput``)."""

    operation: LeasedOperation
    outcome: Outcome
    state: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class BatchSettle:
    """A batch settle mutation: its ``name``, ``document`` and how its answer's ``data``
    gives one result per item."""

    name: str
    document: str
    results: Callable[
        [dict[str, Any]],
        Sequence[
            FinalizeOperationsFinalizeOperationsResults | RecordOperationsRecordOperationsResults
        ],
    ]


FINALIZE = BatchSettle(
    "finalizeOperations",
    doc.FINALIZE_OPERATIONS,
    lambda data: FinalizeOperations.model_validate(data).finalize_operations.results,
)
RECORD = BatchSettle(
    "recordOperations",
    doc.RECORD_OPERATIONS,
    lambda data: RecordOperations.model_validate(data).record_operations.results,
)

ITEM_FIELD = re.compile(r"(?:input\.)?items\[(\d+)\]")
"""A refused field of a batch settle's item: ``items[3].errorMessage``."""


def lacks_scope(error: ConnectorStoreError) -> bool:
    """Whether ``error`` refuses a call for a right the token lacks (``FORBIDDEN``): what
    ``workAvailable`` (``service``) and ``throttleAccount`` (``operator``) answer a token
    the worker still works with."""
    return isinstance(error, GraphQLResponseError) and error.code == "FORBIDDEN"


def within_body(items: list["Settle"]) -> list[list["Settle"]]:
    """``items`` in order, in runs whose fields encode to at most half ``MAX_BODY_BYTES`` of
    JSON together (a run of one may pass it: the server then refuses that request alone)."""
    runs: list[list[Settle]] = []
    size = 0
    for item in items:
        item_size = len(json.dumps(item.fields, separators=(",", ":")))
        if not runs or size + item_size > MAX_BODY_BYTES // 2:
            runs.append([])
            size = 0
        runs[-1].append(item)
        size += item_size
    return runs


def refused_items(error: GraphQLResponseError, count: int) -> dict[int, str]:
    """The items of a batch of ``count`` that ``error`` refuses, by index, each with its
    field and the server's message; empty unless every error of it is a
    ``BAD_USER_INPUT`` naming one of the items (then the call wrote nothing)."""
    named: dict[int, str] = {}
    for each in error.errors:
        extensions = each.get("extensions") or {}
        found = ITEM_FIELD.match(str(extensions.get("field") or ""))
        if extensions.get("code") != "BAD_USER_INPUT" or found is None:
            return {}
        index = int(found.group(1))
        if index >= count:
            return {}
        named.setdefault(index, f"{extensions['field']}: {each.get('message', '')}")
    return named
