"""Per-request DataLoaders: nested fields batch their store reads through these, one
statement per nesting level. Mutations tell them what they wrote (``remember``), so a later
field of the same request reads the fresh row, not the one cached before the write."""

from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field

from strawberry.dataloader import DataLoader

from store import ConnectorStore
from store.records import OperationRecord, WatchIdentity, WatchRecord


@dataclass
class Loaders:
    """The loaders of one request; never shared between requests.

    ``operation``: an operation by ``(caller_did, operation_id)`` (federation's
    ``_entities``). ``watch``: a watch by identity (``Operation.watch``). ``watch_operations``: the
    operations of a watch identity, oldest first (``Watch.operations``).
    """

    store: ConnectorStore
    operation: DataLoader[tuple[str, str], OperationRecord | None] = field(init=False)
    watch: DataLoader[WatchIdentity, WatchRecord | None] = field(init=False)
    watch_operations: DataLoader[WatchIdentity, list[OperationRecord]] = field(init=False)

    def __post_init__(self) -> None:
        self.operation = DataLoader(load_fn=self._load_operations)
        self.watch = DataLoader(load_fn=self._load_watches)
        self.watch_operations = DataLoader(load_fn=self._load_watch_operations)

    async def _load_operations(
        self, keys: Sequence[tuple[str, str]]
    ) -> list[OperationRecord | None]:
        found = {
            (record.caller_did, record.operation_id): record
            for record in await self.store.operations.list_operations(keys)
        }
        return [found.get(key) for key in keys]

    async def _load_watches(self, identities: Sequence[WatchIdentity]) -> list[WatchRecord | None]:
        found = {
            record.identity: record for record in await self.store.watches.list_watches(identities)
        }
        return [found.get(identity) for identity in identities]

    async def _load_watch_operations(
        self, identities: Sequence[WatchIdentity]
    ) -> list[list[OperationRecord]]:
        found: dict[WatchIdentity, list[OperationRecord]] = {key: [] for key in identities}
        for record in await self.store.operations.list_operations_of_watches(identities):
            found[record.identity].append(record)
        return [found[identity] for identity in identities]

    def remember(self, *records: OperationRecord | WatchRecord | None) -> None:
        """Take in rows a mutation just wrote (or re-read): a watch replaces the cached one;
        an operation drops the cached operation list of its watch. None is skipped."""
        for record in records:
            if isinstance(record, WatchRecord):
                self.watch.prime(record.identity, record, force=True)
            elif isinstance(record, OperationRecord):
                self.operation.prime((record.caller_did, record.operation_id), record, force=True)
                # DataLoader.clear raises KeyError for a key it never loaded.
                with suppress(KeyError):
                    self.watch_operations.clear(record.identity)

    def forget_all(self) -> None:
        """Drop every cached row, after a write that changed rows it did not return."""
        self.operation.clear_all()
        self.watch.clear_all()
        self.watch_operations.clear_all()
