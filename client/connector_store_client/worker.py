"""``Worker``: leases operations in batches, hands each batch to a handler, settles what the
handler answers, and lets go of what it holds when stopped."""

import asyncio
import contextlib
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from connector_store_client import documents as doc
from connector_store_client.client import Client, backoff_s
from connector_store_client.errors import ConnectorStoreError, GraphQLResponseError, TransportError
from connector_store_client.models.finalize_operations import (
    FinalizeOperations,
    FinalizeOperationsFinalizeOperationsResults,
)
from connector_store_client.models.fragments import LeasedOperation as LeasedOperationFields
from connector_store_client.models.mark_sends_started import MarkSendsStarted
from connector_store_client.models.record_operations import (
    RecordOperations,
    RecordOperationsRecordOperationsResults,
)
from connector_store_client.models.renew_leases import RenewLeases
from connector_store_client.outcomes import Committed, Deferred, Failed, Outcome, RetryAfter

log = logging.getLogger("connector_store_client.worker")

REFUSED_CODES = frozenset({"UNAUTHENTICATED", "FORBIDDEN"})
"""Codes of an answer that refuses the worker's token itself: asking again with it is
refused again, so ``run`` stops and raises it rather than retrying forever."""
MAX_THROTTLE_MS = 86_400_000


class LeasedOperation(LeasedOperationFields):
    """An operation leased to this worker, as the ``LeasedOperation`` fragment answers it (the
    model ariadne-codegen generates, snake_case fields): its key, envelope
    (``deterministic_event_id`` is the provider's idempotency key: send it with the write),
    ``attempts`` so far, ``version`` and ``lease_expires_at`` (epoch ms)."""

    @property
    def key(self) -> dict[str, str]:
        """The ``OperationKeyInput``."""
        return {"callerDID": self.caller_did, "operationID": self.operation_id}


Handler = Callable[[list[LeasedOperation]], Awaitable[Sequence[Outcome]]]
"""Gets a batch of leased operations, answers one outcome per operation, in order."""


@dataclass
class WorkerStats:
    """What a worker settled: operations committed, retried, failed and deferred; ``lost``:
    leased operations whose lease another token took before they were settled; ``released``:
    leases let go unsettled (on stop)."""

    committed: int = 0
    retried: int = 0
    failed: int = 0
    deferred: int = 0
    lost: int = 0
    released: int = 0


class Worker:
    """Runs ``handler`` over the operations it leases from ``client``.

    It leases batches of up to ``batch_size`` (1 to 500) for ``lease_ms`` with
    ``concurrency`` lessees at once, each until ``leaseOperations`` answers nothing; then it
    waits for a ``workAvailable`` signal (or ``fallback_s``, when signals stop). The
    lessees send ``leaseOperations`` one at a time (handlers and settles still run
    ``concurrency`` at once): concurrent calls of one worker would only contend for the same
    due rows, each walking past the rows the others hold locked and leasing short batches.
    After an empty answer, a lessee whose turn comes before any batch has been settled since
    that call was sent is done without asking: this worker has freed nothing, so the
    answer would be the same (work others free wakes it). For each
    batch it marks the sends started (``marker``, this worker's run id), renews the leases
    every third of ``lease_ms`` while the handler runs, and settles the outcomes in one
    request per kind: ``finalizeOperations`` (the watch due ``verify_delay_ms`` later),
    ``recordOperations``, then ``releaseLeases`` for what waits. Only calls safe to repeat
    are retried after a lost answer; a lost ``leaseOperations`` answer is not repeated (its
    leases lapse after ``lease_ms``). On ``stop()`` (SIGTERM and SIGINT call it while
    ``run`` runs in the main thread) it leases no more, gives running handlers
    ``shutdown_grace_s`` to finish and settles them, then cancels the rest and releases
    their leases. A token the server refuses (``UNAUTHENTICATED``, ``FORBIDDEN``: expired,
    signed out, lacking ``service``) stops it the same way, and ``run`` raises that
    ``GraphQLResponseError``."""

    def __init__(
        self,
        client: Client,
        handler: Handler,
        *,
        connector_name: str | None = None,
        account_keys: Sequence[str] | None = None,
        batch_size: int = 100,
        lease_ms: int = 30_000,
        concurrency: int = 2,
        fallback_s: float = 10.0,
        verify_delay_ms: int = 60_000,
        shutdown_grace_s: float = 10.0,
        marker: str | None = None,
    ) -> None:
        self.client = client
        self.handler = handler
        self.connector_name = connector_name
        self.account_keys = None if account_keys is None else list(account_keys)
        self.batch_size = batch_size
        self.lease_ms = lease_ms
        self.concurrency = concurrency
        self.fallback_s = fallback_s
        self.verify_delay_ms = verify_delay_ms
        self.shutdown_grace_s = shutdown_grace_s
        self.marker = marker or f"worker-{uuid.uuid4().hex}"
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._refused: GraphQLResponseError | None = None
        self._leasing = asyncio.Lock()
        self._settled = 0
        """Batches settled or released so far: what may have made work leasable again."""
        self._empty_at: int | None = None
        """``_settled`` when the last empty ``leaseOperations`` answer was asked for (None:
        no empty answer this round)."""

    def stop(self) -> None:
        """Lease no more; ``run`` returns once running batches are settled or released."""
        self._stopping.set()

    async def run(self, *, until_idle: bool = False) -> WorkerStats:
        """Work until ``stop()`` (or, with ``until_idle``, until one round of leasing finds
        nothing); returns the stats. Raises the ``GraphQLResponseError`` of a refused token
        (``REFUSED_CODES``) once it has stopped."""
        loop = asyncio.get_running_loop()
        handled = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                loop.add_signal_handler(signum, self.stop)
                handled.append(signum)
        watcher = None if until_idle else asyncio.create_task(self._watch_work())
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                self._empty_at = None
                await asyncio.gather(*(self._lessee() for _ in range(self.concurrency)))
                if until_idle:
                    break
                await self._until_woken()
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            for signum in handled:
                loop.remove_signal_handler(signum)
        if self._refused is not None:
            raise self._refused
        return self.stats

    def _refuses_token(self, error: ConnectorStoreError) -> bool:
        """Whether ``error`` refuses the worker's token (``REFUSED_CODES``): then it stops."""
        if isinstance(error, GraphQLResponseError) and error.code in REFUSED_CODES:
            log.error("the server refuses this worker's token (%s): stopping", error)
            self._refused = error
            self.stop()
            return True
        return False

    async def _until_woken(self) -> None:
        waits = [asyncio.create_task(self._wake.wait()), asyncio.create_task(self._stopping.wait())]
        try:
            await asyncio.wait(waits, timeout=self.fallback_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    async def _watch_work(self) -> None:
        failures = 0
        while True:
            try:
                async for _ in self.client.subscribe(
                    doc.WORK_AVAILABLE, {"connectorName": self.connector_name}
                ):
                    failures = 0
                    self._wake.set()
            except ConnectorStoreError as error:
                if self._refuses_token(error):
                    return
                failures += 1
                log.warning("workAvailable dropped (%s); the fallback timer stands in", error)
            await asyncio.sleep(backoff_s(min(failures + 1, 6)))

    async def _lessee(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            token = f"{self.marker}-{uuid.uuid4().hex}"
            try:
                batch = await self._lease(token)
            except ConnectorStoreError as error:
                if self._refuses_token(error):
                    return
                failures += 1
                log.warning("leaseOperations failed (%s); leasing again later", error)
                await asyncio.sleep(backoff_s(min(failures, 6)))
                continue
            failures = 0
            if not batch:
                return
            try:
                await self._work(token, batch)
            finally:
                self._settled += 1

    async def _lease(self, token: str) -> list[LeasedOperation]:
        """This lessee's turn at ``leaseOperations``: its batch, empty when there is nothing
        to lease, when the worker stops, or when the last call answered nothing and no batch
        was settled since it was sent."""
        async with self._leasing:
            if self._stopping.is_set() or self._empty_at == self._settled:
                return []
            asked_at = self._settled
            data = await self.client.execute(
                doc.LEASE_OPERATIONS,
                {
                    "input": {
                        "leaseToken": token,
                        "leaseMs": self.lease_ms,
                        "limit": self.batch_size,
                        "connectorName": self.connector_name,
                        "accountKeys": self.account_keys,
                    }
                },
                repeatable=False,
            )
            operations = data["leaseOperations"]["operations"]
            if not operations:
                self._empty_at = asked_at
            return [LeasedOperation.model_validate(raw) for raw in operations]

    async def _work(self, token: str, batch: list[LeasedOperation]) -> None:
        marked = await self._mark(token, batch)
        if not marked:
            return
        held = {(operation.caller_did, operation.operation_id) for operation in marked}
        renewing = asyncio.create_task(self._renew(token, held))
        handling = asyncio.create_task(self._handle(marked))
        try:
            stopping = asyncio.create_task(self._stopping.wait())
            await asyncio.wait([handling, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not handling.done():
                await asyncio.wait([handling], timeout=self.shutdown_grace_s)
            if not handling.done():
                handling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await handling
                await self._release(token, marked)
                self.stats.released += len(marked)
                return
            await self._settle(token, marked, handling.result(), held)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _mark(self, token: str, batch: list[LeasedOperation]) -> list[LeasedOperation]:
        items = [
            operation.key | {"leaseToken": token, "marker": self.marker} for operation in batch
        ]
        data = await self.client.execute(
            doc.MARK_SENDS_STARTED, {"input": {"items": items}}, repeatable=True
        )
        results = MarkSendsStarted.model_validate(data).mark_sends_started.results
        marked = [op for op, result in zip(batch, results, strict=True) if result.applied]
        self.stats.lost += len(batch) - len(marked)
        return marked

    async def _handle(self, batch: list[LeasedOperation]) -> list[Outcome]:
        try:
            outcomes = list(await self.handler(batch))
        except Exception as error:
            log.exception("the handler raised: every operation of its batch is retried")
            return [RetryAfter(5_000, "handler_error", None, repr(error)[:1000])] * len(batch)
        if len(outcomes) != len(batch):
            message = f"the handler answered {len(outcomes)} outcomes for {len(batch)} operations"
            log.error(message)
            return [RetryAfter(5_000, "handler_error", None, message)] * len(batch)
        return outcomes

    async def _renew(self, token: str, held: set[tuple[str, str]]) -> None:
        while held:
            await asyncio.sleep(self.lease_ms / 3000)
            keys = [{"callerDID": caller, "operationID": op} for caller, op in sorted(held)]
            try:
                data = await self.client.execute(
                    doc.RENEW_LEASES,
                    {"input": {"leaseToken": token, "leaseMs": self.lease_ms, "keys": keys}},
                    repeatable=True,
                )
            except ConnectorStoreError as error:
                log.warning("renewLeases failed (%s); trying again", error)
                continue
            answer = RenewLeases.model_validate(data).renew_leases.renewed
            renewed = {(operation.caller_did, operation.operation_id) for operation in answer}
            held &= renewed

    async def _settle(
        self,
        token: str,
        batch: list[LeasedOperation],
        outcomes: list[Outcome],
        held: set[tuple[str, str]],
    ) -> None:
        finals: list[tuple[LeasedOperation, str, dict[str, Any]]] = []
        records: list[tuple[LeasedOperation, str, dict[str, Any]]] = []
        waiting: list[LeasedOperation] = []
        throttles: dict[tuple[str, str], int] = {}
        for operation, outcome in zip(batch, outcomes, strict=True):
            base = operation.key | {"version": operation.version, "leaseToken": token}
            if isinstance(outcome, Committed):
                finals.append(
                    (
                        operation,
                        "COMMITTED",
                        base
                        | {
                            "delayMs": self.verify_delay_ms,
                            "resultEntity": outcome.result_entity,
                            "providerEtag": outcome.provider_etag,
                        },
                    )
                )
                continue
            record = base | {"fromState": "ATTEMPTED"}
            if isinstance(outcome, RetryAfter):
                record |= {
                    "toState": "ATTEMPTED",
                    "kind": outcome.kind,
                    "httpStatus": outcome.http_status,
                    "errorMessage": outcome.message,
                    "delayMs": outcome.delay_ms,
                    "sendMarker": self.marker,
                }
                waiting.append(operation)
                if outcome.throttle_account:
                    provider_account = (operation.connector_name, operation.account_key)
                    throttles[provider_account] = max(
                        throttles.get(provider_account, 0), outcome.delay_ms
                    )
                records.append((operation, "ATTEMPTED", record))
            elif isinstance(outcome, Failed):
                record |= {
                    "toState": "FAILED",
                    "kind": outcome.kind,
                    "httpStatus": outcome.http_status,
                    "errorMessage": outcome.message,
                    "sendMarker": self.marker,
                }
                records.append((operation, "FAILED", record))
            elif isinstance(outcome, Deferred):
                record |= {
                    "toState": "ATTEMPTED",
                    "countAttempt": False,
                    "deferReason": outcome.reason,
                    "errorMessage": outcome.message,
                    "delayMs": outcome.delay_ms,
                }
                waiting.append(operation)
                records.append((operation, "ATTEMPTED", record))
            else:
                raise TypeError(f"not an outcome: {outcome!r}")
        for (connector, account), delay in throttles.items():
            await self._throttle(connector, account, delay)
        if finals:
            data = await self.client.execute(
                doc.FINALIZE_OPERATIONS,
                {"input": {"items": [item for _, _, item in finals]}},
                repeatable=True,
            )
            self._count(
                token, finals, FinalizeOperations.model_validate(data).finalize_operations.results
            )
        if records:
            data = await self.client.execute(
                doc.RECORD_OPERATIONS,
                {"input": {"items": [item for _, _, item in records]}},
                repeatable=True,
            )
            self._count(
                token, records, RecordOperations.model_validate(data).record_operations.results
            )
        if waiting:
            await self._release(token, waiting)

    def _count(
        self,
        token: str,
        sent: list[tuple[LeasedOperation, str, dict[str, Any]]],
        results: Sequence[
            FinalizeOperationsFinalizeOperationsResults | RecordOperationsRecordOperationsResults
        ],
    ) -> None:
        for (operation, state, item), result in zip(sent, results, strict=True):
            stored = result.operation
            # A repeat after a lost answer finds its own write: the state written, the
            # version past the one it was sent with, the lease still this token's.
            own = (
                stored is not None
                and stored.state.value == state
                and stored.lease_token == token
                and stored.version > operation.version
            )
            if not (result.applied or own):
                self.stats.lost += 1
            elif state == "COMMITTED":
                self.stats.committed += 1
            elif state == "FAILED":
                self.stats.failed += 1
            elif item.get("countAttempt") is False:
                self.stats.deferred += 1
            else:
                self.stats.retried += 1

    async def _release(self, token: str, operations: list[LeasedOperation]) -> None:
        keys = [operation.key for operation in operations]
        try:
            await self.client.execute(
                doc.RELEASE_LEASES,
                {"input": {"leaseToken": token, "keys": keys}},
                repeatable=True,
            )
        except TransportError as error:
            log.warning("releaseLeases failed (%s); the leases lapse in time", error)

    async def _throttle(self, connector: str, account: str, delay_ms: int) -> None:
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


async def enqueue(client: Client, claims: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claim each of ``claims`` (``ClaimOperationInput`` dicts without lease fields; at most
    500) without taking a lease: each is due at once for any worker's ``leaseOperations``.
    Safe to repeat: a claim sent twice answers ``OperationExists``. Returns each result in
    order (``__typename`` ``OperationClaimed``, ``OperationExists``, ``OperationConflict``
    or ``OperationCollected``)."""
    data = await client.execute(
        doc.CLAIM_OPERATIONS, {"input": {"items": list(claims)}}, repeatable=True
    )
    results: list[dict[str, Any]] = data["claimOperations"]["results"]
    return results
