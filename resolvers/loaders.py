"""Per-request DataLoaders: nested fields batch their store reads through these."""

from collections.abc import Sequence
from dataclasses import dataclass, field

from strawberry.dataloader import DataLoader

from store import ConnectorStore
from store.records import WatchIdentity, WatchRecord


@dataclass
class Loaders:
    """The loaders of one request; never shared between requests."""

    store: ConnectorStore
    watch: DataLoader[WatchIdentity, WatchRecord | None] = field(init=False)

    def __post_init__(self) -> None:
        self.watch = DataLoader(load_fn=self._load_watches)

    async def _load_watches(self, identities: Sequence[WatchIdentity]) -> list[WatchRecord | None]:
        found = {
            record.identity: record for record in await self.store.watches.list_watches(identities)
        }
        return [found.get(identity) for identity in identities]
