"""``ConnectorStore``: one façade over the store's parts, sharing a database and a clock."""

from collections.abc import Callable

from store.accounts import AccountsStore
from store.batches import BatchesStore, one_reader
from store.claims import ClaimsInOne
from store.context import Clock, ReadWinner, StoreContext, random_id, system_clock
from store.counts import CountsStore
from store.database import Database
from store.events import EventsStore
from store.finalizes import FinalizeInOne
from store.leasing import LeasingStore
from store.operations import OperationsStore
from store.operator import OperatorStore
from store.pauses import PausesStore
from store.pending_auth import PendingAuthStore
from store.persisted_queries import PersistedQueriesStore
from store.retention import RetentionStore
from store.sign_in import SignInStore
from store.stats import StatsStore
from store.sync_state import SyncStateStore
from store.wakeups import WakeupsStore
from store.watches import WatchesStore
from store.winners import WinnersStore


class ConnectorStore:
    """The connector store (seed ``createConnectorStore``).

    ``db``: a ``Database`` (connected by the caller). ``clock``: "now" in epoch ms, the
    system time by default. ``read_winner``: the current winner digest of a document,
    by default the ``kubun_connector_document_winner`` table. ``new_id``: mints node keys
    and incarnations. Parts: ``operations``, ``watches``, ``winners``, ``retention``,
    ``accounts``, ``pauses`` (pausing accounts), ``leasing``, ``operator`` (bulk operator
    controls), ``pending_auth``, ``sync_state``, ``persisted_queries``, ``batches`` (the
    batch forms of the settling writes), ``wakeups`` (what wakes idle workers:
    ``store.wakeups``), ``counts`` (grouped counts for the dashboard), ``stats`` (the
    operations' event log counted by time, for the dashboard's charts), ``events`` (the
    readers of the event log every write of an operation or a watch appends to), ``sign_in``
    (people's one-time sign-in codes and the sessions they open).
    """

    def __init__(
        self,
        db: Database,
        *,
        clock: Clock = system_clock,
        read_winner: ReadWinner | None = None,
        new_id: Callable[[], str] = random_id,
    ) -> None:
        self.db = db
        context = StoreContext(db=db, clock=clock, new_id=new_id)
        self.winners = WinnersStore(context)
        read = read_winner or self.winners.read_winner
        self.watches = WatchesStore(context, read)
        in_one = db.dialect.logs_in_write
        claims = ClaimsInOne(context) if in_one else None
        self.operations = OperationsStore(
            context,
            self.watches,
            read_winner,
            FinalizeInOne(db) if read_winner is None else None,
            claims,
        )
        self.batches = BatchesStore(
            context,
            self.watches,
            None if read_winner is None else one_reader(read_winner),
            claims,
        )
        self.retention = RetentionStore(context)
        self.accounts = AccountsStore(context)
        self.pauses = PausesStore(context, self.accounts)
        self.operator = OperatorStore(
            context,
            self.batches.read_winners if read_winner is None else one_reader(read_winner),
        )
        self.counts = CountsStore(context)
        self.stats = StatsStore(context)
        self.leasing = LeasingStore(context)
        self.pending_auth = PendingAuthStore(context)
        self.sync_state = SyncStateStore(context)
        self.persisted_queries = PersistedQueriesStore(context)
        self.wakeups = WakeupsStore(context)
        self.sign_in = SignInStore(context)
        self.events = EventsStore(db, clock)
        self.clock = clock
