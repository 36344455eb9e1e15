"""The root ``Subscription`` (DESIGN section 8): streams a viewer subscribes to, over
graphql-transport-ws on ``/graphql`` or Apollo's multipart protocol over HTTP.

Each field's rule is in ``resolvers.permissions`` (checked before the stream starts); the
streams come from this process's ``resolvers.live.Hub``.
"""

from collections.abc import AsyncGenerator

import strawberry

from resolvers import fields
from resolvers.context import Info
from schema.live import WorkSignal
from schema.scalars import EpochMillis
from store import validation as check


@strawberry.type
class Subscription:
    @fields.subscription(
        description="A signal each time work may have become leasable for `connectorName` "
        "(omitted: any connector): a new or reissued claim, a released lease, a finished "
        "operation (its entity's next one and its account's cap are free), a lease that "
        "lapsed, a deferral that came due, an account's cap or throttle eased. The first "
        "signal comes at once: a worker leases until `leaseOperations` answers nothing after "
        "each signal, so nothing that commits meanwhile is missed. Signals pending for a "
        "slow reader are coalesced, never queued. Needs `service`, as `dueOperations`. "
        "Errors: FORBIDDEN; TOO_MANY_SUBSCRIPTIONS; UNAUTHENTICATED when the token expires "
        "(the stream ends)."
    )
    async def work_available(
        self, info: Info, connector_name: str | None = None
    ) -> AsyncGenerator[WorkSignal, None]:
        connector = check.optional_key("connectorName", connector_name)
        async for name, at in info.context.live().work(info.context.subscriber(), connector):
            yield WorkSignal(connector_name=name, at=EpochMillis(at))
