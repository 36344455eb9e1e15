"""Which operations a filter's key fields match, and who may see an operation: written once
for the operations (their lists and bulk writes, ``store.operations.filter_conditions``) and
for their events (the operations' event stream, ``store.events``, and the dashboard's charts,
``store.stats``), which carry the operation's key and the envelope fields these match, so an
event matches the same filters and viewers with or without its operation."""

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from store import validation as check
from store.tables import operation as op
from store.tables import operation_event as event


@dataclass(frozen=True)
class Matched:
    """The columns of one table that a filter's key fields compare: the operation's key,
    its owner, connector and account, and ``kind`` (the operation's last recorded outcome's
    kind; an event's own outcome's kind)."""

    caller_did: sa.ColumnElement[str]
    operation_id: sa.ColumnElement[str]
    owner_did: sa.ColumnElement[str]
    connector_name: sa.ColumnElement[str]
    account_key: sa.ColumnElement[str]
    kind: sa.ColumnElement[str]


OPERATION: Matched = Matched(
    op.c.caller_did,
    op.c.operation_id,
    op.c.owner_did,
    op.c.connector_name,
    op.c.account_key,
    op.c.last_kind,
)
"""The operations' columns."""

EVENT: Matched = Matched(
    event.c.caller_did,
    event.c.operation_id,
    event.c.owner_did,
    event.c.connector_name,
    event.c.account_key,
    event.c.kind,
)
"""The operations' events' columns: the operation's key and envelope fields, copied by each
event as it is written (``store.events.OPERATION_MATCHED``)."""


def visible(columns: Any, did: str) -> sa.ColumnElement[bool]:
    """The rule of who may see an operation, or its events, without the right to read every
    tenant's: its caller and its owner. ``columns``: anything with ``caller_did`` and
    ``owner_did`` (a ``Matched``, a table's or an alias's ``.c``); ``did`` already checked."""
    return sa.or_(columns.caller_did == did, columns.owner_did == did)


def key_conditions(
    columns: Matched,
    *,
    caller_did: str | None = None,
    operation_id: str | None = None,
    connector_name: str | None = None,
    owner_did: str | None = None,
    account_key: str | None = None,
    kind: str | None = None,
    visible_to: str | None = None,
) -> list[sa.ColumnElement[bool]]:
    """The conditions on ``columns``' table of each field given (None: unfiltered), checked
    in this order: each must equal its column; ``visible_to`` matches the caller or the owner
    (``visible``). Raises ``InvalidInput`` naming the first malformed field (``callerDID``,
    ``visibleTo``, ...)."""
    keys = {
        "callerDID": (columns.caller_did, caller_did),
        "operationID": (columns.operation_id, operation_id),
        "connectorName": (columns.connector_name, connector_name),
        "ownerDID": (columns.owner_did, owner_did),
        "accountKey": (columns.account_key, account_key),
        "kind": (columns.kind, kind),
    }
    conditions = [
        column == check.key(field, value)
        for field, (column, value) in keys.items()
        if value is not None
    ]
    if visible_to is not None:
        conditions.append(visible(columns, check.key("visibleTo", visible_to)))
    return conditions
