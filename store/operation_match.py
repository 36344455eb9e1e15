"""Which operations a filter's key fields match: written once for the operations' lists
and bulk writes (``store.operations.filter_conditions``) and the operations' event stream
(``store.events.EventsStore.operation_events_after``)."""

import sqlalchemy as sa

from store import validation as check
from store.tables import operation as op


def key_conditions(
    *,
    node_key: str | None = None,
    caller_did: str | None = None,
    operation_id: str | None = None,
    connector_name: str | None = None,
    owner_did: str | None = None,
    account_key: str | None = None,
    kind: str | None = None,
    last_error: str | None = None,
    visible_to: str | None = None,
) -> list[sa.ColumnElement[bool]]:
    """The conditions on the ``operation`` table of each field given (None: unfiltered),
    checked in this order: each must equal its column (``kind`` the last recorded outcome's,
    ``last_kind``; ``last_error`` the last recorded message's, ``last_error``); ``visible_to``
    matches the caller or the owner. Raises ``InvalidInput`` naming the first malformed field
    (``callerDID``, ``visibleTo``, ...)."""
    keys = {
        "nodeKey": (op.c.node_key, node_key),
        "callerDID": (op.c.caller_did, caller_did),
        "operationID": (op.c.operation_id, operation_id),
        "connectorName": (op.c.connector_name, connector_name),
        "ownerDID": (op.c.owner_did, owner_did),
        "accountKey": (op.c.account_key, account_key),
        "kind": (op.c.last_kind, kind),
    }
    conditions = [
        column == check.key(field, value)
        for field, (column, value) in keys.items()
        if value is not None
    ]
    if last_error is not None:
        conditions.append(op.c.last_error == check.text("lastError", last_error))
    if visible_to is not None:
        did = check.key("visibleTo", visible_to)
        conditions.append(sa.or_(op.c.caller_did == did, op.c.owner_did == did))
    return conditions
