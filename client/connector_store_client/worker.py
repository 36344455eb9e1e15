"""``Worker``: leases operations in batches, hands each batch to a handler, settles what the
handler answers, and lets go of what it holds when stopped."""

import asyncio
import contextlib
import json
import logging
import math
import re
import signal
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from connector_store_client import documents as doc
from connector_store_client.bounds import (
    MAX_BATCH,
    MAX_BODY_BYTES,
    MAX_DELAY_MS,
    MAX_KEY_CHARS,
    MAX_LEASE_MS,
    MAX_THROTTLE_MS,
    MIN_LEASE_MS,
)
from connector_store_client.client import Client, backoff_s
from connector_store_client.errors import ConnectorStoreError, GraphQLResponseError
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
from connector_store_client.outcomes import (
    Committed,
    Failed,
    Outcome,
    RetryAfter,
    UnsendableResult,
    sendable,
    sendable_message,
)

log = logging.getLogger("connector_store_client.worker")

REFUSED_CODES = frozenset({"UNAUTHENTICATED", "FORBIDDEN"})
"""Codes of an answer that refuses the worker's token itself: asking again with it is
refused again, so ``run`` stops and raises it rather than retrying forever (but for
``workAvailable`` and ``throttleAccount``, which the worker does without)."""
HANDLER_ERROR_MS = 5_000
"""How long an operation waits, in ms, when the handler gave no outcome the server takes
for it (it raised, answered something else, or the server refused the outcome)."""
TOKEN_SUFFIX_CHARS = 33
"""What a lease token adds to the worker's ``marker``: ``-`` and 32 hex digits."""


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
    leases let go unsettled (on stop, or when a settle failed); ``refused``: outcomes the
    server refused, recorded as ``handler_error`` retries instead (and counted there)."""

    committed: int = 0
    retried: int = 0
    failed: int = 0
    deferred: int = 0
    lost: int = 0
    released: int = 0
    refused: int = 0


class Worker:
    """Runs ``handler`` over the operations it leases from ``client``.

    It leases batches of up to ``batch_size`` for ``lease_ms`` (ms) with
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
    request per kind: ``throttleAccount`` for a 429, ``finalizeOperations`` (the watch due
    ``verify_delay_ms`` later), ``recordOperations``, then ``releaseLeases`` for what
    waits. Only calls safe to repeat are retried after a lost answer; a lost
    ``leaseOperations`` answer is not repeated (its leases lapse after ``lease_ms``).

    No answer of the handler ends the run. Each outcome is sent as ``sendable`` makes it
    (its message cut to ``MAX_MESSAGE_BYTES`` bytes of UTF-8, its delay clamped to 0 to
    ``MAX_DELAY_MS``). Where it gives no outcome (it raises: the whole batch; it answers
    something other than one outcome per operation: the whole batch, or the one operation
    whose answer is not an outcome) the operation is retried in ``HANDLER_ERROR_MS`` with
    kind ``handler_error`` and a message saying what was wrong. An outcome the server still
    refuses (``BAD_USER_INPUT`` naming ``items[i]``: a ``kind`` or ``http_status`` out of
    bounds, an oversized ``result_entity``) is retried the same way, the refusal as its
    message, and the rest of its batch settled as answered. A mark or settle that fails
    otherwise (an answer lost past the retries) releases the batch's leases it still holds,
    and its lessee waits (``backoff_s``, longer for each such batch in a row) before leasing
    again.

    Scopes: ``operations:write`` (its calls: ``leaseOperations``, ``markSendsStarted``,
    ``renewLeases``, ``finalizeOperations``, ``recordOperations``, ``releaseLeases``; a
    token without ``service`` works only the operations it called). ``workAvailable`` needs
    ``service``: without it the worker looks for work every ``fallback_s``, saying so once.
    ``throttleAccount`` needs ``operator``: without it a 429 outcome records its retry but
    throttles no account, said once.

    On ``stop()`` (SIGTERM and SIGINT call it while ``run`` runs in the main thread) it
    leases no more, gives running handlers ``shutdown_grace_s`` to finish and settles them,
    then cancels the rest and releases their leases. A token the server refuses
    (``UNAUTHENTICATED``, or ``FORBIDDEN`` for a call it cannot do without: expired, signed
    out, lacking ``operations:write``) stops it the same way, and ``run`` raises that
    ``GraphQLResponseError``.

    Raises ``ValueError`` naming the argument for ``batch_size`` outside 1 to ``MAX_BATCH``,
    ``lease_ms`` outside ``MIN_LEASE_MS`` to ``MAX_LEASE_MS``, ``concurrency`` below 1,
    ``verify_delay_ms`` outside 0 to ``MAX_DELAY_MS``, ``fallback_s`` not above 0,
    ``shutdown_grace_s`` below 0, ``account_keys`` a string or more than ``MAX_BATCH``
    keys, or a ``marker`` empty or too long for a lease token."""

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
        _whole("batch_size", batch_size, 1, MAX_BATCH)
        _whole("lease_ms", lease_ms, MIN_LEASE_MS, MAX_LEASE_MS)
        _whole("concurrency", concurrency, 1)
        _whole("verify_delay_ms", verify_delay_ms, 0, MAX_DELAY_MS)
        _seconds("fallback_s", fallback_s, positive=True)
        _seconds("shutdown_grace_s", shutdown_grace_s, positive=False)
        if isinstance(account_keys, str) or (
            account_keys is not None and len(account_keys) > MAX_BATCH
        ):
            raise ValueError(f"account_keys must be a list of at most {MAX_BATCH} account keys")
        if marker is not None and not (
            isinstance(marker, str) and 1 <= len(marker) <= MAX_KEY_CHARS - TOKEN_SUFFIX_CHARS
        ):
            raise ValueError(
                f"marker must be a string of 1 to {MAX_KEY_CHARS - TOKEN_SUFFIX_CHARS} characters"
            )
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
        self._woken = True
        """Whether ``workAvailable`` may wake this worker: False once it was refused
        (``FORBIDDEN``: the token lacks ``service``); then the fallback timer alone does."""
        self._throttling = True
        """Whether 429 outcomes throttle their accounts: False once ``throttleAccount`` was
        refused (``FORBIDDEN``: the token lacks ``operator``)."""
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
        watcher = None if until_idle or not self._woken else asyncio.create_task(self._watch_work())
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
                if lacks_scope(error):
                    self._woken = False
                    log.warning(
                        "workAvailable needs the service scope, which this worker's token "
                        "lacks (%s): it looks for work every %g s (fallback_s) instead",
                        error,
                        self.fallback_s,
                    )
                    return
                if self._refuses_token(error):
                    return
                failures += 1
                log.warning("workAvailable dropped (%s); the fallback timer stands in", error)
            await asyncio.sleep(backoff_s(min(failures + 1, 6)))

    async def _lessee(self) -> None:
        failures = 0
        # Batches in a row whose settle failed: each waits longer before leasing again, so a
        # failure that lasts does not lease, fail and release in a tight loop.
        failed_batches = 0
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
                settled = await self._work(token, batch)
            finally:
                self._settled += 1
            failed_batches = 0 if settled else failed_batches + 1
            if failed_batches:
                await asyncio.sleep(backoff_s(min(failed_batches, 6)))

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

    async def _work(self, token: str, batch: list[LeasedOperation]) -> bool:
        """Mark, handle and settle ``batch``. False when a call failed (the leases the batch
        still held released), True otherwise."""
        try:
            marked = await self._mark(token, batch)
        except ConnectorStoreError as error:
            if not self._refuses_token(error):
                log.error("markSendsStarted failed (%s): releasing its batch unsent", error)
            await self._release(token, batch)
            self.stats.released += len(batch)
            return False
        if not marked:
            return True
        held = {(operation.caller_did, operation.operation_id) for operation in marked}
        leases = BatchLeases({(op.caller_did, op.operation_id): op for op in marked})
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
                return True
            try:
                await self._settle(token, marked, handling.result(), leases)
            except ConnectorStoreError as error:
                if not self._refuses_token(error):
                    log.error(
                        "settling a batch failed (%s): releasing the leases of the %d "
                        "operations it left unsettled",
                        error,
                        len(leases.unsettled),
                    )
                await self._let_go(token, leases)
                return False
            return True
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
        """The handler's outcomes for ``batch``, each ``sendable``; where the handler gave
        none (it raised, answered something other than one outcome per operation, or an
        outcome that cannot be sent) a ``handler_error`` retry saying what was wrong."""
        try:
            answered = await self.handler(batch)
        except Exception as error:
            log.exception("the handler raised: every operation of its batch is retried")
            return [retry_for(f"the handler raised {error!r}")] * len(batch)
        try:
            outcomes = list(answered)
        except TypeError:
            message = f"the handler answered {answered!r:.200}, not a sequence of outcomes"
            log.error("%s: every operation of its batch is retried", message)
            return [retry_for(message)] * len(batch)
        if len(outcomes) != len(batch):
            message = f"the handler answered {len(outcomes)} outcomes for {len(batch)} operations"
            log.error("%s: every operation of its batch is retried", message)
            return [retry_for(message)] * len(batch)
        sent: list[Outcome] = []
        for operation, outcome in zip(batch, outcomes, strict=True):
            try:
                sent.append(sendable(outcome))
            except UnsendableResult as error:
                log.error("%s is committed without its result: %s", operation.key, error)
                sent.append(error.bare)
            except (TypeError, ValueError) as error:
                log.error("the handler's answer for %s: %s; it is retried", operation.key, error)
                sent.append(retry_for(f"the handler's answer: {error}"))
        return sent

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
        leases: "BatchLeases",
    ) -> None:
        """Settle ``batch`` by its (sendable) ``outcomes``: throttles, then one
        ``finalizeOperations`` and one ``recordOperations``, then ``releaseLeases`` for
        what waits. An item the server refuses (``BAD_USER_INPUT`` naming ``items[i]``) is
        left out and the others sent again; a refused finalize is sent again without its
        result and etag (the provider took the write), and each other refused one is
        recorded as a ``handler_error`` retry saying what was refused. ``leases`` keeps the
        leases the batch still holds: on return, none. Raises the ``ConnectorStoreError`` of a call
        that failed otherwise."""
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
            retries = [self._item(token, item.operation, retry_for(why)) for item, why in refused]
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
        """Send ``items`` in ``mutation``s, one for each run of them within half the server's
        body bound (``within_body``); the items one refuses (``refused_items``) are left out
        and the others sent again. Returns each refused item with what was refused
        (the field and the server's message). Each item written leaves
        ``leases.unsettled``, and joins ``leases.waiting`` when it holds its lease still (a
        retry or deferral recorded). Raises the ``ConnectorStoreError`` of a call that failed
        otherwise."""
        refused: list[tuple[Settle, str]] = []
        for chunk in within_body(items):
            pending = list(chunk)
            while pending:
                try:
                    data = await self.client.execute(
                        mutation.document,
                        {"input": {"items": [item.fields for item in pending]}},
                        repeatable=True,
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


def _whole(name: str, value: Any, lowest: int, highest: int | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is an int from ``lowest`` to
    ``highest`` (None: no bound)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < lowest
        or (highest is not None and value > highest)
    ):
        bound = f"from {lowest} to {highest}" if highest is not None else f"of at least {lowest}"
        raise ValueError(f"{name} must be an integer {bound}, not {value!r}")


def _seconds(name: str, value: Any, *, positive: bool) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number of seconds,
    above 0 (``positive``) or at least 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        bound = "above 0" if positive else "of at least 0"
        raise ValueError(f"{name} must be a finite number of seconds {bound}, not {value!r}")


def retry_for(problem: str) -> RetryAfter:
    """The outcome of an operation the handler gave no sendable outcome for, or whose
    outcome the server refused: a ``handler_error`` retry in ``HANDLER_ERROR_MS`` whose
    message is ``problem`` (``sendable_message``)."""
    return RetryAfter(HANDLER_ERROR_MS, "handler_error", None, sendable_message(problem))


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
