"""Per-request DataLoaders: nested fields batch their store reads through these, one
statement per nesting level. Mutations tell them what they wrote (``remember``), so a later
field of the same request reads the fresh row, not the one cached before the write.

Every batch loads at most what is left of the request's bytes (``Budget.reading``) and
spends what it loaded; a key whose row the allowance left out fails with
``RESPONSE_TOO_LARGE`` rather than reading as absent. Values carry each row's size, so an
answer repeated from the cache is charged again (``Loaders.charge``)."""

from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from graphql import GraphQLError
from strawberry.dataloader import DataLoader, DefaultCache

from resolvers.budget import Budget
from store import ConnectorStore
from store.records import (
    OperationEventRecord,
    OperationKey,
    OperationRecord,
    WatchEventRecord,
    WatchIdentity,
    WatchRecord,
)
from store.sizes import Measured

_R = TypeVar("_R")
_K = TypeVar("_K", bound=Hashable)


EventPage = tuple[_K, str | None, int]
"""A page of a row's events: the row's key, the ``sequence`` it starts after, its size."""


@dataclass(slots=True)
class Sized(Generic[_R]):
    """A loaded row and its size in bytes (``store.sizes``). ``prepaid``: its batch already
    spent its size from the budget when it was loaded, which pays for its first answer
    (``Loaders.charge``). A row a mutation wrote has size 0: a mutation's answer is bounded
    by its input."""

    record: _R
    size: int
    prepaid: bool = False


def by_key(
    keys: Sequence[_K],
    page: Measured[_R],
    key_of: Callable[[_R], _K],
    order: Callable[[_K], tuple[str, ...]],
    too_large: Callable[[], GraphQLError],
    *,
    one_row: bool,
) -> dict[_K, list[Sized[_R]] | GraphQLError]:
    """The rows of ``page`` (in ``order`` of their keys) under each of ``keys``; when the
    allowance cut the page, every key after the last one kept fails with ``too_large``, and
    that last one too unless a key has ``one_row`` (its other rows may have been left out)."""
    found: dict[_K, list[Sized[_R]] | GraphQLError] = {key: [] for key in keys}
    for record, size in zip(page, page.sizes, strict=True):
        rows = found[key_of(record)]
        assert isinstance(rows, list), "no key fails before the page is read"
        rows.append(Sized(record, size, prepaid=True))
    if page.cut:
        last = order(key_of(page[-1])) if page else None
        for key in keys:
            here = order(key)
            if last is None or here > last or (here == last and not one_row):
                found[key] = too_large()
    return found


@dataclass
class Loaders:
    """The loaders of one request and its budget; never shared between requests.

    ``operation``: an operation by ``(caller_did, operation_id)`` (federation's
    ``_entities``). ``watch``: a watch by identity (``Operation.watch``, ``_entities``).
    ``watch_operations``: the operations of a watch identity, oldest first
    (``Watch.operations``). ``operation_events``/``watch_events``: a page of a row's events
    by ``(row key, after, size)`` (``Operation.events``, ``Watch.events``): one statement
    for every row asking for the same page.
    """

    store: ConnectorStore
    budget: Budget = field(default_factory=Budget)
    operation: DataLoader[tuple[str, str], Sized[OperationRecord] | None] = field(init=False)
    watch: DataLoader[WatchIdentity, Sized[WatchRecord] | None] = field(init=False)
    watch_operations: DataLoader[WatchIdentity, list[Sized[OperationRecord]]] = field(init=False)
    operation_events: DataLoader[EventPage[tuple[str, str]], Measured[OperationEventRecord]] = (
        field(init=False)
    )
    watch_events: DataLoader[EventPage[WatchIdentity], Measured[WatchEventRecord]] = field(
        init=False
    )
    _watch_operations_cached: DefaultCache[WatchIdentity, list[Sized[OperationRecord]]] = field(
        init=False, default_factory=DefaultCache
    )
    _operations_cached: DefaultCache[tuple[str, str], Sized[OperationRecord] | None] = field(
        init=False, default_factory=DefaultCache
    )
    _watches_cached: DefaultCache[WatchIdentity, Sized[WatchRecord] | None] = field(
        init=False, default_factory=DefaultCache
    )
    _written_operations: dict[tuple[str, str], OperationRecord] = field(
        init=False, default_factory=dict
    )
    """The operations this request's mutations wrote (``remember``), by key: ``operation``
    answers them without a read."""
    _written_watches: dict[WatchIdentity, WatchRecord] = field(init=False, default_factory=dict)
    """The watches this request's mutations wrote, by identity: ``watch`` answers them."""

    def __post_init__(self) -> None:
        self.operation = DataLoader(
            load_fn=self._load_operations, cache_map=self._operations_cached
        )
        self.watch = DataLoader(load_fn=self._load_watches, cache_map=self._watches_cached)
        self.watch_operations = DataLoader(
            load_fn=self._load_watch_operations, cache_map=self._watch_operations_cached
        )
        self.operation_events = DataLoader(load_fn=self._load_operation_events)
        self.watch_events = DataLoader(load_fn=self._load_watch_events)

    async def _load_operation_events(
        self, pages: Sequence["EventPage[tuple[str, str]]"]
    ) -> list[Measured[OperationEventRecord]]:
        found: dict[EventPage[tuple[str, str]], Measured[OperationEventRecord]] = {}
        for (after, size), group in _by_page(pages).items():
            keys = [OperationKey(caller_did=c, operation_id=o) for c, o in group]
            read = await self.store.events.operation_events_of(keys, after=after, limit=size)
            found |= {(key, after, size): read[key] for key in group}
        return [found[page] for page in pages]

    async def _load_watch_events(
        self, pages: Sequence["EventPage[WatchIdentity]"]
    ) -> list[Measured[WatchEventRecord]]:
        found: dict[EventPage[WatchIdentity], Measured[WatchEventRecord]] = {}
        for (after, size), group in _by_page(pages).items():
            read = await self.store.events.watch_events_of(group, after=after, limit=size)
            found |= {(identity, after, size): read[identity] for identity in group}
        return [found[page] for page in pages]

    async def _load_operations(
        self, keys: Sequence[tuple[str, str]]
    ) -> list[Sized[OperationRecord] | GraphQLError | None]:
        answers = written(keys, self._written_operations)
        unread = [key for key in keys if key not in answers]
        if unread:
            async with self.budget.reading("_entities") as allowance:
                page = await self.store.operations.list_operations(unread, max_bytes=allowance)
                self.budget.spend("_entities", page.sizes)
            found = by_key(
                unread,
                page,
                lambda record: (record.caller_did, record.operation_id),
                lambda key: key,
                lambda: self.budget.too_large("_entities"),
                one_row=True,
            )
            answers |= {key: one(found[key]) for key in unread}
        return [answers[key] for key in keys]

    async def _load_watches(
        self, identities: Sequence[WatchIdentity]
    ) -> list[Sized[WatchRecord] | GraphQLError | None]:
        answers = written(identities, self._written_watches)
        unread = [identity for identity in identities if identity not in answers]
        if unread:
            async with self.budget.reading("watch") as allowance:
                page = await self.store.watches.list_watches(unread, max_bytes=allowance)
                self.budget.spend("watch", page.sizes)
            found = by_key(
                unread,
                page,
                lambda record: record.identity,
                lambda identity: identity.parts,
                lambda: self.budget.too_large("watch"),
                one_row=True,
            )
            answers |= {identity: one(found[identity]) for identity in unread}
        return [answers[identity] for identity in identities]

    async def _load_watch_operations(
        self, identities: Sequence[WatchIdentity]
    ) -> list[list[Sized[OperationRecord]] | GraphQLError]:
        async with self.budget.reading("operations") as allowance:
            page = await self.store.operations.list_operations_of_watches(
                identities, max_bytes=allowance
            )
            self.budget.spend("operations", page.sizes)
        found = by_key(
            identities,
            page,
            lambda record: record.identity,
            lambda identity: identity.parts,
            lambda: self.budget.too_large("operations"),
            one_row=False,
        )
        return [found[identity] for identity in identities]

    def remember(self, *records: OperationRecord | WatchRecord | None) -> None:
        """Take in rows a mutation just wrote (or re-read): a watch replaces the cached one;
        an operation replaces the cached one and drops the cached operation list of its
        watch. None is skipped. The rows are kept by key and answered when a field loads
        them (``_written_operations``, ``_written_watches``): most requests never do, and
        pay for no cache entry then."""
        for record in records:
            if isinstance(record, WatchRecord):
                identity = record.identity
                self._written_watches[identity] = record
                forget(self.watch, self._watches_cached, identity)
            elif isinstance(record, OperationRecord):
                key = (record.caller_did, record.operation_id)
                self._written_operations[key] = record
                forget(self.operation, self._operations_cached, key)
                # Most requests never load a watch's operations: no identity to build then.
                if self._watch_operations_cached.cache_map:
                    forget(self.watch_operations, self._watch_operations_cached, record.identity)
        if records:
            # A write appended events: pages read before it are stale.
            self.operation_events.clear_all()
            self.watch_events.clear_all()

    @staticmethod
    def charge(rows: Iterable[Sized[_R]]) -> Measured[_R]:
        """Rows answered from these loaders, each with what its answer costs now: nothing
        for a row's first answer when its load paid for it, its size for every other."""
        records: list[_R] = []
        sizes: list[int] = []
        for row in rows:
            records.append(row.record)
            sizes.append(0 if row.prepaid else row.size)
            row.prepaid = False
        return Measured(records, sizes)

    def forget_all(self) -> None:
        """Drop every cached row and every row a mutation wrote (``remember``), after a write
        that changed rows it did not return."""
        self._written_operations.clear()
        self._written_watches.clear()
        self.operation.clear_all()
        self.watch.clear_all()
        self.watch_operations.clear_all()
        self.operation_events.clear_all()
        self.watch_events.clear_all()


def _by_page(pages: Sequence[EventPage[_K]]) -> dict[tuple[str | None, int], list[_K]]:
    """The row keys of ``pages``, grouped by the page they ask for (after, size)."""
    grouped: dict[tuple[str | None, int], list[_K]] = {}
    for key, after, size in pages:
        grouped.setdefault((after, size), []).append(key)
    return grouped


def written(keys: Sequence[_K], rows: dict[_K, _R]) -> dict[_K, Sized[_R] | GraphQLError | None]:
    """The rows among ``keys`` a mutation of the request wrote, by key, at size 0: a
    mutation's answer is bounded by its input."""
    return {key: Sized(rows[key], 0) for key in keys if key in rows}


def forget(loader: DataLoader[_K, _R], cache: DefaultCache[_K, _R], key: _K) -> None:
    """Drop ``loader``'s cached answer for ``key`` (its cache is ``cache``), if it holds
    one."""
    if cache.cache_map:
        # DataLoader.clear raises KeyError for a key it never loaded.
        with suppress(KeyError):
            loader.clear(key)


def one(rows: list[Sized[_R]] | GraphQLError) -> Sized[_R] | GraphQLError | None:
    """The one row under a key (or None), or the key's error."""
    return rows if isinstance(rows, GraphQLError) else (rows[0] if rows else None)
