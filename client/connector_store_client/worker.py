"""``Worker``: leases operations in batches, hands each batch to a handler, settles what the
handler answers, and lets go of what it holds when stopped."""

import asyncio
import contextlib
import logging
import signal
import uuid
from collections.abc import Awaitable, Callable, Sequence

from connector_store_client import documents as doc
from connector_store_client.bounds import (
    MAX_BATCH,
    MAX_DELAY_MS,
    MAX_KEY_CHARS,
    MAX_LEASE_MS,
    MIN_LEASE_MS,
)
from connector_store_client.checks import seconds, whole
from connector_store_client.client import Client, backoff_s
from connector_store_client.errors import ConnectorStoreError, GraphQLResponseError
from connector_store_client.handler_errors import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_RETRY_BASE_MS,
    DEFAULT_RETRY_MAX_MS,
    HANDLER_ERROR,
    HANDLER_TIMEOUT,
    HandlerRetries,
)
from connector_store_client.models.mark_sends_started import MarkSendsStarted
from connector_store_client.models.renew_leases import RenewLeases
from connector_store_client.outcomes import Outcome, UnsendableResult, sendable
from connector_store_client.settling import (
    Abandoned,
    BatchLeases,
    BatchSettling,
    LeasedOperation,
    WorkerStats,
    lacks_scope,
)

log = logging.getLogger("connector_store_client.worker")

DEFAULT_HANDLER_TIMEOUT_S = 300.0
"""How long a handler may run on one batch before it is cancelled (``handler_timeout_s``)."""
TOKEN_SUFFIX_CHARS = 33
"""What a lease token adds to the worker's ``marker``: ``-`` and 32 hex digits."""

Handler = Callable[[list[LeasedOperation]], Awaitable[Sequence[Outcome]]]
"""Gets a batch of leased operations, answers one outcome per operation, in order."""


class Worker(BatchSettling):
    """Runs ``handler`` over the operations it leases from ``client``.

    ``connector_name`` is the connector whose operations it leases; it has no default:
    None, given explicitly, leases every connector's work (what the token may write).
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
    every third of ``lease_ms`` from the lease until the batch is settled (after a failed
    renewal, sooner), and settles the outcomes in one request per kind:
    ``throttleAccount`` for a 429, ``finalizeOperations`` (the watch due
    ``verify_delay_ms`` later), ``recordOperations``, then ``releaseLeases`` for what
    waits. Only calls safe to repeat are retried after a lost answer; a lost
    ``leaseOperations`` answer is not repeated (its leases lapse after ``lease_ms``).

    A finished outcome is never released for another send: a mark or settle whose answer
    is lost past the client's retries (the server restarting, say), or answered
    ``SERVICE_UNAVAILABLE``, is kept and sent again (``backoff_s``), the leases renewed
    meanwhile, until the server answers it; an operation whose lease another token took in
    between is counted ``lost``. A lease that lapsed while no other token took it still
    settles.

    No answer of the handler ends the run. Each outcome is sent as ``sendable`` makes it
    (its message cut to ``MAX_MESSAGE_BYTES`` bytes of UTF-8, its delay clamped to 0 to
    ``MAX_DELAY_MS``). Where it gives no outcome (it raises: the whole batch; it runs past
    ``handler_timeout_s`` seconds, None for no bound: the whole batch, the handler
    cancelled, kind ``handler_timeout``; it answers something other than one outcome per
    operation: the whole batch, or the one operation whose answer is not an outcome) the
    attempt is counted, kind ``handler_error``, with a message saying what was wrong (the
    handler's exception), and the operation retried after an exponential backoff with
    jitter (``HandlerRetries.delay_ms``: from ``retry_base_ms`` doubling up to
    ``retry_max_ms``, each between half and all of it), until its ``max_attempts``-th
    attempt, which ends it ``FAILED`` with that message. An outcome the server still
    refuses (``BAD_USER_INPUT`` naming ``items[i]``: a ``kind`` or ``http_status`` out of
    bounds, an oversized ``result_entity``) is treated the same way, the refusal as its
    message, and the rest of its batch settled as answered. A mark or settle the server
    refuses outright (another error) releases the batch's leases it still holds, and its
    lessee waits (``backoff_s``, longer for each such batch in a row) before leasing again.

    Scopes: ``operations:write`` (its calls: ``leaseOperations``, ``markSendsStarted``,
    ``renewLeases``, ``finalizeOperations``, ``recordOperations``, ``releaseLeases``; a
    token without ``service`` works only the operations it called). ``workAvailable`` needs
    ``service``: without it the worker looks for work every ``fallback_s``, saying so once.
    ``throttleAccount`` needs ``operator``: without it a 429 outcome records its retry but
    throttles no account, said once.

    On ``stop()`` (SIGTERM and SIGINT call it while ``run`` runs in the main thread) it
    leases no more, gives running handlers ``shutdown_grace_s`` to finish and settles them,
    then cancels the rest and releases their leases; a settle still waiting for the server
    is waited for (a second ``stop()`` gives it up, its leases left to lapse). A token the
    server refuses (``UNAUTHENTICATED``, or ``FORBIDDEN`` for a call it cannot do without:
    expired, signed out, lacking ``operations:write``) stops it the same way, and ``run``
    raises that ``GraphQLResponseError``.

    Raises ``ValueError`` naming the argument for ``batch_size`` outside 1 to ``MAX_BATCH``,
    ``lease_ms`` outside ``MIN_LEASE_MS`` to ``MAX_LEASE_MS``, ``concurrency`` below 1,
    ``verify_delay_ms`` outside 0 to ``MAX_DELAY_MS``, ``fallback_s`` not above 0,
    ``shutdown_grace_s`` below 0, ``max_attempts`` below 1, ``retry_base_ms`` outside 1 to
    ``MAX_DELAY_MS`` or ``retry_max_ms`` outside it to ``MAX_DELAY_MS``,
    ``handler_timeout_s`` not above 0, ``account_keys`` a string or more than
    ``MAX_BATCH`` keys, or a ``marker`` empty or too long for a lease token."""

    def __init__(
        self,
        client: Client,
        handler: Handler,
        *,
        connector_name: str | None,
        account_keys: Sequence[str] | None = None,
        batch_size: int = 100,
        lease_ms: int = 30_000,
        concurrency: int = 2,
        fallback_s: float = 10.0,
        verify_delay_ms: int = 60_000,
        shutdown_grace_s: float = 10.0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retry_base_ms: int = DEFAULT_RETRY_BASE_MS,
        retry_max_ms: int = DEFAULT_RETRY_MAX_MS,
        handler_timeout_s: float | None = DEFAULT_HANDLER_TIMEOUT_S,
        marker: str | None = None,
    ) -> None:
        whole("batch_size", batch_size, 1, MAX_BATCH)
        whole("lease_ms", lease_ms, MIN_LEASE_MS, MAX_LEASE_MS)
        whole("concurrency", concurrency, 1)
        whole("verify_delay_ms", verify_delay_ms, 0, MAX_DELAY_MS)
        seconds("fallback_s", fallback_s, positive=True)
        seconds("shutdown_grace_s", shutdown_grace_s, positive=False)
        whole("max_attempts", max_attempts, 1)
        whole("retry_base_ms", retry_base_ms, 1, MAX_DELAY_MS)
        whole("retry_max_ms", retry_max_ms, retry_base_ms, MAX_DELAY_MS)
        if handler_timeout_s is not None:
            seconds("handler_timeout_s", handler_timeout_s, positive=True)
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
        self.retries = HandlerRetries(max_attempts, retry_base_ms, retry_max_ms)
        self.handler_timeout_s = handler_timeout_s
        self.marker = marker or f"worker-{uuid.uuid4().hex}"
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._abandoning = asyncio.Event()
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

    async def run(self, *, until_idle: bool = False) -> WorkerStats:
        """Work until ``stop()``, waiting for work between rounds: it does not return when
        nothing is left. With ``until_idle`` it returns after one round of leasing finds
        nothing due now (an operation retried later is not waited for). Returns the stats.
        Raises the ``GraphQLResponseError`` of a refused token (``REFUSED_CODES``) once it
        has stopped."""
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
        """Mark, handle and settle ``batch``, renewing its leases from the lease's answer
        until it is settled. False when a call failed (the leases the batch still held
        released, or left to lapse when a settle was given up), True otherwise."""
        held = {(operation.caller_did, operation.operation_id) for operation in batch}
        renewing = asyncio.create_task(self._renew(token, held))
        try:
            return await self._mark_handle_settle(token, batch, held)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _mark_handle_settle(
        self, token: str, batch: list[LeasedOperation], held: set[tuple[str, str]]
    ) -> bool:
        """``_work`` but the renewals: ``held`` (the keys ``_renew`` renews) is narrowed to
        the operations whose mark applied."""
        try:
            marked = await self._mark(token, batch)
        except ConnectorStoreError as error:
            if not self._refuses_token(error):
                log.error("markSendsStarted failed (%s): releasing its batch unsent", error)
            held.clear()
            await self._release(token, batch)
            self.stats.released += len(batch)
            return False
        held &= {(operation.caller_did, operation.operation_id) for operation in marked}
        if not marked:
            return True
        leases = BatchLeases({(op.caller_did, op.operation_id): op for op in marked})
        handling = asyncio.create_task(self._handle(marked))
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
        except Abandoned as error:
            log.error("%s (%d operations)", error, len(leases.unsettled))
            return False
        except ConnectorStoreError as error:
            if not self._refuses_token(error):
                log.error(
                    "the server refused to settle a batch (%s): releasing the leases of "
                    "the %d operations it left unsettled",
                    error,
                    len(leases.unsettled),
                )
            await self._let_go(token, leases)
            return False
        return True

    async def _mark(self, token: str, batch: list[LeasedOperation]) -> list[LeasedOperation]:
        """``markSendsStarted`` for ``batch``, sent until the server answers it (or, while
        the server cannot be reached, until the worker stops: ``Abandoned``); the operations
        whose mark applied (the others are ``lost``)."""
        items = [
            operation.key | {"leaseToken": token, "marker": self.marker} for operation in batch
        ]
        data = await self._persist(
            "markSendsStarted",
            doc.MARK_SENDS_STARTED,
            {"input": {"items": items}},
            until=self._stopping,
        )
        results = MarkSendsStarted.model_validate(data).mark_sends_started.results
        marked = [op for op, result in zip(batch, results, strict=True) if result.applied]
        self.stats.lost += len(batch) - len(marked)
        return marked

    async def _handle(self, batch: list[LeasedOperation]) -> list[Outcome]:
        """The handler's outcomes for ``batch``, each ``sendable``; where the handler gave
        none (it raised, ran past ``handler_timeout_s``, answered something other than one
        outcome per operation, or an outcome that cannot be sent) what ``self.retries``
        makes of the attempt (a retry, or ``Failed`` at the last), saying what was wrong."""

        def failed(kind: str, problem: str) -> list[Outcome]:
            return [self.retries.outcome(op.attempts, kind, problem) for op in batch]

        try:
            async with asyncio.timeout(self.handler_timeout_s):
                answered = await self.handler(batch)
        except TimeoutError:
            problem = f"the handler ran past handler_timeout_s ({self.handler_timeout_s:g} s)"
            log.error("%s: it was cancelled, and its batch's attempts counted", problem)
            return failed(HANDLER_TIMEOUT, problem)
        except Exception as error:
            log.exception("the handler raised: its batch's attempts are counted")
            return failed(HANDLER_ERROR, f"the handler raised {error!r}")
        try:
            outcomes = list(answered)
        except TypeError:
            message = f"the handler answered {answered!r:.200}, not a sequence of outcomes"
            log.error("%s: its batch's attempts are counted", message)
            return failed(HANDLER_ERROR, message)
        if len(outcomes) != len(batch):
            message = f"the handler answered {len(outcomes)} outcomes for {len(batch)} operations"
            log.error("%s: its batch's attempts are counted", message)
            return failed(HANDLER_ERROR, message)
        sent: list[Outcome] = []
        for operation, outcome in zip(batch, outcomes, strict=True):
            try:
                sent.append(sendable(outcome))
            except UnsendableResult as error:
                log.error("%s is committed without its result: %s", operation.key, error)
                sent.append(error.bare)
            except (TypeError, ValueError) as error:
                log.error(
                    "the handler's answer for %s: %s; its attempt is counted", operation.key, error
                )
                problem = f"the handler's answer: {error}"
                sent.append(self.retries.outcome(operation.attempts, HANDLER_ERROR, problem))
        return sent

    async def _renew(self, token: str, held: set[tuple[str, str]]) -> None:
        """Renew the leases of ``held`` every third of ``lease_ms`` (after a failed renewal,
        after ``backoff_s``, at most that third) until cancelled or none is held: a key
        ``renewLeases`` does not answer lost its lease and leaves ``held``."""
        failures = 0
        while held:
            wait_s = self.lease_ms / 3000
            await asyncio.sleep(wait_s if not failures else min(wait_s, backoff_s(failures)))
            keys = [{"callerDID": caller, "operationID": op} for caller, op in sorted(held)]
            try:
                data = await self.client.execute(
                    doc.RENEW_LEASES,
                    {"input": {"leaseToken": token, "leaseMs": self.lease_ms, "keys": keys}},
                    repeatable=True,
                )
            except ConnectorStoreError as error:
                failures = min(failures + 1, 6)
                log.warning("renewLeases failed (%s); trying again", error)
                continue
            failures = 0
            answer = RenewLeases.model_validate(data).renew_leases.renewed
            renewed = {(operation.caller_did, operation.operation_id) for operation in answer}
            held &= renewed
