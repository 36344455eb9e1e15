"""The background sweeper, and ``collect``: the one sweep both run.

``sweep`` collects terminal operations past their ``Retention`` (committed and superseded
ones last updated more than ``finished_ms`` ago, failed ones more than ``failed_ms`` ago;
each leaves a tombstone of its key), deletes the tombstones collected more than ``keys_ms``
ago, and collects each event log (operations' and watches') as a prefix of the events older
than ``events_ms`` (``store.events``), each in batches of ``batch`` until a batch comes back
short, and deletes pending authorizations whose ``expires_at`` is before now and the sign-ins
that can no longer be used (codes expired unused, sessions past their end:
``store.sign_in``), then on SQLite cuts the write-ahead log to zero bytes when no reader or
writer is in the way (``Database.truncate_wal``), all under the
sweep lock: on PostgreSQL
an advisory lock makes one replica (or ``connector-store collect``) sweep at a time; the
others skip. It yields to the event loop between batches, so requests keep being answered
during a long sweep. The ``Sweeper`` runs it every ``interval_s`` and logs what it deleted.

Stopping is cooperative: ``stop`` wakes the sleeping loop, a sweep in flight ends after its
current statement, and only a sweep stuck past ``STOP_GRACE_S`` is cancelled. Cancelling a
task in the middle of a query can leave ``databases``' connection unreleased (its rollback
fails on the interrupted connection), and then closing the pool waits forever.
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from server.settings import Settings
from store import ConnectorStore, background
from store.retention import RETAIN_EVENTS_S, RETAIN_FAILED_S, RETAIN_FINISHED_S, RETAIN_KEYS_S

log = logging.getLogger("connector_store.sweeper")

STOP_GRACE_S = 10.0


@dataclass(frozen=True, slots=True)
class Retention:
    """How long a sweep keeps what is finished, in ms: ``finished_ms`` a committed or
    superseded operation after its last update, ``failed_ms`` a failed one after its last
    update, ``keys_ms`` a collected operation's tombstone after its collection (the
    idempotency window), ``events_ms`` an event of either log after its write. The defaults
    are the settings' defaults."""

    finished_ms: int = RETAIN_FINISHED_S * 1000
    failed_ms: int = RETAIN_FAILED_S * 1000
    keys_ms: int = RETAIN_KEYS_S * 1000
    events_ms: int = RETAIN_EVENTS_S * 1000

    @classmethod
    def of(cls, settings: Settings) -> "Retention":
        """``RETAIN_FINISHED_SECONDS``, ``RETAIN_FAILED_SECONDS``, ``RETAIN_KEYS_SECONDS``
        and ``RETAIN_EVENTS_SECONDS`` (unset: the longest operation retention)."""
        return cls(
            finished_ms=settings.retain_finished_seconds * 1000,
            failed_ms=settings.retain_failed_seconds * 1000,
            keys_ms=settings.retain_keys_seconds * 1000,
            events_ms=settings.events_retention_seconds * 1000,
        )


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep deleted: finished operations, expired pending auth, in how many
    collect batches, expired tombstones, the events collected from the operations' and the
    watches' logs, and ended sign-ins."""

    operations: int
    pending_auth: int
    batches: int
    tombstones: int = 0
    operation_events: int = 0
    watch_events: int = 0
    sign_ins: int = 0


UNITS = ((86_400, "day"), (3_600, "hour"), (60, "minute"))


def human(seconds: float) -> str:
    """A duration as a person reads it, in the largest unit it is a whole number of: ``7 days``,
    ``1 hour``, ``5 minutes``, else seconds (``1.5 s``)."""
    for size, unit in UNITS:
        count, rest = divmod(seconds, size)
        if count and not rest:
            return f"{int(count)} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} s"


def cutoffs(retention: Retention, now: int) -> tuple[int, int, int]:
    """The sweep's cutoffs at ``now`` (epoch ms): committed and superseded operations last
    updated before the first, failed ones before the second, and tombstones collected
    before the third are deleted."""
    return (
        max(now - retention.finished_ms, 0),
        max(now - retention.failed_ms, 0),
        max(now - retention.keys_ms, 0),
    )


async def sweep(
    store: ConnectorStore,
    *,
    retention: Retention,
    batch: int,
    stopping: asyncio.Event | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> SweepResult | None:
    """One sweep under the sweep lock; None when another replica holds it (nothing
    deleted). ``retention``: how long finished operations and tombstones are kept;
    ``batch``: the most one collect (or tombstone) statement deletes (1 to 10,000); "now"
    is the store's clock. Stops between batches once ``stopping`` is set; ``on_batch`` is
    told how many operations each collect batch deleted.

    Raises what the store raises (a database error, ``InvalidInput`` for a bad batch).
    """
    store_retention = store.retention
    async with store_retention.exclusive_sweep() as mine:
        if not mine:
            return None
        now = store.clock()
        older_than, failed_older_than, keys_cutoff = cutoffs(retention, now)
        operations = batches = tombstones = 0
        while stopping is None or not stopping.is_set():
            deleted = await store_retention.collect_finished_operations(
                older_than, batch, failed_older_than=failed_older_than
            )
            operations += deleted
            batches += 1
            if on_batch is not None:
                on_batch(deleted)
            if deleted < batch:
                break
            await asyncio.sleep(0)
        while stopping is None or not stopping.is_set():
            deleted = await store_retention.delete_expired_tombstones(keys_cutoff, batch)
            tombstones += deleted
            if deleted < batch:
                break
            await asyncio.sleep(0)
        collected: dict[str, int] = {}
        for name, collect in (
            ("operation", store.events.collect_operation_events),
            ("watch", store.events.collect_watch_events),
        ):
            collected[name] = 0
            while stopping is None or not stopping.is_set():
                deleted = await collect(retention.events_ms, batch)
                collected[name] += deleted
                if deleted < batch:
                    break
                await asyncio.sleep(0)
        pending_auth = await store.pending_auth.delete_expired_pending_auth(now)
        sign_ins = await store.sign_in.delete_ended(now)
        # The log of the writes above, and of any behind a reader that held an old
        # snapshot, would otherwise wait for the next write to be cut back.
        await store.db.truncate_wal()
    return SweepResult(
        operations,
        pending_auth,
        batches,
        tombstones,
        operation_events=collected["operation"],
        watch_events=collected["watch"],
        sign_ins=sign_ins,
    )


class Sweeper:
    """Runs ``sweep`` now and then every ``interval_s`` seconds until stopped.

    ``retention``: how long finished operations and tombstones are kept. ``batch``: the
    most rows one collect statement deletes (1 to 10,000). "Now" is the store's clock.
    ``on_result``: called after each run with its result (None: skipped) and whether it
    failed (the metrics).
    """

    def __init__(
        self,
        store: ConnectorStore,
        *,
        interval_s: float,
        retention: Retention,
        batch: int,
        on_result: Callable[[SweepResult | None, bool], None] | None = None,
    ) -> None:
        self.store = store
        self.on_result = on_result
        self.interval_s = interval_s
        self.retention = retention
        self.batch = batch
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def sweep(self) -> SweepResult | None:
        """One sweep (``sweep``), logged; None when another replica holds the sweep lock.

        Raises what the store raises (a database error); ``run`` logs it and carries on.
        """
        result = await sweep(
            self.store, retention=self.retention, batch=self.batch, stopping=self._stopping
        )
        if result is None:
            log.info("sweep: skipped, another replica is sweeping")
            return None
        log.info(
            "sweep: deleted %d finished operations, %d expired pending auth, %d expired "
            "tombstones, %d operation events, %d watch events, %d ended sign-ins",
            result.operations,
            result.pending_auth,
            result.tombstones,
            result.operation_events,
            result.watch_events,
            result.sign_ins,
        )
        return result

    async def run(self) -> None:
        """Sweep, then wait ``interval_s``, until ``stop``; an error is logged and the next
        sweep runs."""
        while not self._stopping.is_set():
            try:
                result = await self.sweep()
            except Exception:
                log.exception("sweep failed; trying again in %s s", self.interval_s)
                self.report(None, failed=True)
            else:
                self.report(result, failed=False)
            await background.set_within(self._stopping, self.interval_s)

    def report(self, result: SweepResult | None, *, failed: bool) -> None:
        if self.on_result is not None:
            try:
                self.on_result(result, failed)
            except Exception:
                log.exception("sweeper: reporting a run failed")

    def start(self) -> None:
        """Start ``run`` in a background task."""
        if self._task is None:
            self._stopping.clear()
            self._task = asyncio.create_task(self.run(), name="connector-store-sweeper")
            log.info(
                "sweeper: every %s, finished operations kept %s (failed %s), "
                "tombstones of their keys %s, events %s, batches of %d",
                human(self.interval_s),
                human(self.retention.finished_ms / 1000),
                human(self.retention.failed_ms / 1000),
                human(self.retention.keys_ms / 1000),
                human(self.retention.events_ms / 1000),
                self.batch,
            )

    async def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the loop and wait for it to end: a sweep in flight finishes its current
        statement and stops; one still running after ``grace_s`` seconds is cancelled."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping.set()
        done, _ = await asyncio.wait({task}, timeout=grace_s)
        if not done:
            log.warning("sweeper: a sweep outlived %s s of grace; cancelling it", grace_s)
            await background.stop(task)
        log.info("sweeper: stopped")

    @property
    def running(self) -> bool:
        """True while the background task is alive."""
        return self._task is not None and not self._task.done()
