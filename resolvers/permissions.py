"""Rights: the scopes each root field needs, and which rows a viewer may see and write.

``RULES`` holds a ``Rule`` for every root field of ``Query``, ``Mutation`` and
``Subscription``: the scopes it needs and, for a write, the input arguments holding the DIDs
the viewer must be (``actors``). ``Authorization`` applies it before the field's resolver runs,
``guard_subscriptions`` before a stream starts; a root field without a rule (its root type
missing from ``RULES`` included) is refused. Refusals raise ``FORBIDDEN``. Returned rows go
through ``resolvers.visible.Visible``. ``IMPLIED`` lists what each scope implies; only
``service`` writes another DID's rows (``Viewer.writes_as``). A non-service viewer reads
``leaseToken`` only of operations it called (``can_see_lease``). Why:
docs/decisions/0013-rights-in-one-fail-closed-table.md.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from graphql import GraphQLError, GraphQLResolveInfo, GraphQLSchema
from strawberry.extensions import SchemaExtension

from resolvers.codes import FORBIDDEN

SERVICE = "service"
OPERATOR = "operator"
OBSERVER = "observer"
METRICS_SCOPE = "metrics"
"""The right to scrape ``/metrics`` (a ``service`` token may too); no GraphQL field needs it."""
READ_SCOPES = frozenset({"operations:read", "watches:read", "sync:read"})
ALL_SCOPES = frozenset(
    {
        *READ_SCOPES,
        "operations:write",
        "watches:write",
        "auth:write",
        "sync:write",
        OPERATOR,
        OBSERVER,
        SERVICE,
    }
)
IMPLIED: dict[str, frozenset[str]] = {
    SERVICE: ALL_SCOPES,
    OPERATOR: frozenset({OBSERVER, *READ_SCOPES}),
    OBSERVER: READ_SCOPES,
}
"""The rights each scope brings with it (besides itself)."""


def with_implied(scopes: frozenset[str]) -> frozenset[str]:
    """``scopes`` and every right they imply (``IMPLIED``)."""
    return scopes.union(*(IMPLIED.get(scope, frozenset()) for scope in scopes))


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is asking: ``did`` (the token's ``sub``; None for no one) and its rights."""

    did: str | None
    scopes: frozenset[str]

    @classmethod
    def service(cls, did: str | None = None) -> "Viewer":
        """A viewer holding every right."""
        return cls(did=did, scopes=ALL_SCOPES)

    @classmethod
    def of_token(cls, sub: str, scope: str) -> "Viewer":
        """The viewer a token's ``sub`` and space-separated ``scope`` name, with the rights
        each scope implies (``IMPLIED``: ``service`` every right)."""
        return cls(did=sub, scopes=with_implied(frozenset(scope.split())))

    @classmethod
    def anonymous(cls) -> "Viewer":
        """A viewer holding no right (a request that reached the schema without a token)."""
        return cls(did=None, scopes=frozenset())

    @property
    def is_service(self) -> bool:
        """True when the viewer acts for every tenant."""
        return SERVICE in self.scopes

    @property
    def reads_all(self) -> bool:
        """True when the viewer reads every tenant's rows (``observer``, which ``operator``
        and ``service`` imply)."""
        return OBSERVER in self.scopes

    @property
    def visible_to(self) -> str | None:
        """The DID a row must belong to for the viewer to read it, or None when it reads
        every row (``reads_all``)."""
        return None if self.reads_all else (self.did or "")

    @property
    def writes_as(self) -> str | None:
        """The DID a row must belong to for the viewer to write it, or None for a service
        (every row)."""
        return None if self.is_service else (self.did or "")


def forbidden(message: str, field: str | None = None) -> GraphQLError:
    """A ``FORBIDDEN`` error; ``field`` (an item's input field, ``items[3].callerDID``)
    goes to ``extensions.field``."""
    extensions = {"code": FORBIDDEN} | ({} if field is None else {"field": field})
    return GraphQLError(message, extensions=extensions)


def require(viewer: Viewer, scope: str) -> None:
    """Raise ``FORBIDDEN`` unless the viewer holds ``scope``."""
    if scope not in viewer.scopes:
        raise forbidden(f"this requires the right {scope!r}")


def can_see(viewer: Viewer, caller_did: str, owner_did: str) -> bool:
    """True when the viewer may see an operation of this caller and owner."""
    return viewer.reads_all or (viewer.did is not None and viewer.did in (caller_did, owner_did))


def sees_owned(viewer: Viewer, owner_did: str) -> bool:
    """True when the viewer may see a row (watch, sync state) of this owner."""
    return viewer.reads_all or owns(viewer, owner_did)


def owns(viewer: Viewer, owner_did: str) -> bool:
    """True when the viewer may write a row of this owner (and see a pending authorization,
    which holds a secret's state): its owner, or a service."""
    return viewer.is_service or (viewer.did is not None and viewer.did == owner_did)


def can_see_lease(viewer: Viewer, caller_did: str) -> bool:
    """True when the viewer may see the lease token of an operation of this caller."""
    return viewer.is_service or (viewer.did is not None and viewer.did == caller_did)


def assert_acts_as(viewer: Viewer, did: str, what: str, field: str | None = None) -> None:
    """Raise ``FORBIDDEN`` unless the viewer is a service or ``did`` itself (``field``: the
    item's input field the error names)."""
    if not owns(viewer, did):
        raise forbidden(f"{what} must be the token's subject (or the token needs 'service')", field)


@dataclass(frozen=True, slots=True)
class Rule:
    """What a root field needs: every scope in ``scopes``; for a write, ``actors`` are the
    paths of the input arguments (GraphQL names, as coerced) that must each equal the
    viewer's DID unless the viewer is a service; ``EACH`` in a path stands for every item
    of a list, and a refusal names the item (``items[3].callerDID``). ``rows`` says how the
    resolver narrows what it returns."""

    scopes: tuple[str, ...]
    actors: tuple[tuple[str, ...], ...] = ()
    rows: str = ""


EACH = "[]"
"""In an actor's path: every item of the list there (a batch's ``items``)."""
OPS_READ = ("operations:read",)
OPS_WRITE = ("operations:write",)
CALLER = ("input", "callerDID")
WATCH_OWNER = ("input", "identity", "ownerDID")
OWNER = ("input", "ownerDID")
ITEM_CALLER = ("input", "items", EACH, "callerDID")
ITEM_OWNER = ("input", "items", EACH, "ownerDID")
ITEM_WATCH_OWNER = ("input", "items", EACH, "identity", "ownerDID")
KEY_CALLER = ("input", "keys", EACH, "callerDID")

QUERY_RULES: dict[str, Rule] = {
    "serverTime": Rule(()),
    "operationEventsHead": Rule(OPS_READ),
    "watchEventsHead": Rule(("watches:read",)),
    "operation": Rule(OPS_READ, rows="caller or owner, else null"),
    "operations": Rule(OPS_READ, rows="caller or owner (store filter)"),
    "node": Rule((), rows="per type: as operation/watch, else NOT_FOUND"),
    "hasNewerOperationOnDocument": Rule(
        OPS_READ, rows="caller or owner, counting only newer ones of the viewer (store filter)"
    ),
    "dueOperations": Rule((SERVICE,)),
    "watch": Rule(("watches:read",), rows="owner, else null"),
    "watchByDocument": Rule(("watches:read",), rows="owner (store filter), else null"),
    "watches": Rule(("watches:read",), rows="owner (store filter)"),
    "dueWatches": Rule((SERVICE,)),
    # Provider accounts are shared by every owner: read by those who read every row.
    "accounts": Rule((OBSERVER,)),
    "connectors": Rule((OBSERVER,)),
    # What an operator's bulk action would touch: asked before it, by those who may act.
    "cancellableCount": Rule((OPERATOR,)),
    "reissuableCount": Rule((OPERATOR,)),
    "rearmableCount": Rule((OPERATOR,)),
    "viewer": Rule((), rows="the viewer itself"),
    "operationCounts": Rule(OPS_READ, rows="caller or owner (store filter)"),
    "operationStats": Rule(OPS_READ, rows="caller or owner (store filter)"),
    "failureGroups": Rule(OPS_READ, rows="caller or owner (store filter)"),
    "watchCounts": Rule(("watches:read",), rows="owner (store filter)"),
    "pendingAuth": Rule(("auth:write",), rows="owner, else null"),
    "syncState": Rule(("sync:read",), rows="owner, else null"),
    "syncStates": Rule(("sync:read",), rows="owner only"),
    # Federation: the subgraph's SDL (what introspection shows), and entities by key, each
    # through its type's ``resolve_reference`` with the checks of ``operation``/``watch``.
    "_service": Rule(()),
    "_entities": Rule((), rows="per type: as operation/watch (null when not visible)"),
}
MUTATION_RULES: dict[str, Rule] = {
    # The owner too: finalize arms the owner's watch, so a tenant claims only its own work.
    "claimOperation": Rule(OPS_WRITE, actors=(CALLER, OWNER)),
    "acquireLease": Rule(OPS_WRITE, actors=(CALLER,)),
    "renewLease": Rule(OPS_WRITE, actors=(CALLER,)),
    "releaseLease": Rule(OPS_WRITE, actors=(CALLER,)),
    "markSendStarted": Rule(OPS_WRITE, actors=(CALLER,)),
    "deferOperation": Rule(OPS_WRITE, actors=(CALLER,)),
    "recordOperation": Rule(OPS_WRITE, actors=(CALLER,)),
    "finalizeOperation": Rule(OPS_WRITE, actors=(CALLER,)),
    "armWatch": Rule(("watches:write",), actors=(WATCH_OWNER,)),
    "claimWatchAttempt": Rule(("watches:write",), actors=(WATCH_OWNER,)),
    "deferWatch": Rule(("watches:write",), actors=(WATCH_OWNER,)),
    "recordVerification": Rule(("watches:write",), actors=(WATCH_OWNER,)),
    # A document's ingress arms the watches of every owner of it: a service's act.
    "recordIngress": Rule(("watches:write", SERVICE)),
    "resumeOfflineDeferred": Rule(("watches:write", "operations:write", SERVICE)),
    "resumeAuthDeferred": Rule(("watches:write", "operations:write"), actors=(OWNER,)),
    "createPendingAuth": Rule(("auth:write",), actors=(OWNER,)),
    "consumePendingAuth": Rule(("auth:write",), rows="owner (read first), else null"),
    # Deletes expired records of every owner: a service's act.
    "deleteExpiredPendingAuth": Rule(("auth:write", SERVICE)),
    "collectFinishedOperations": Rule((SERVICE,)),
    "setSyncState": Rule(("sync:write",), actors=(OWNER,)),
    "updateSyncProgress": Rule(("sync:write",), actors=(OWNER,)),
    "deleteSyncState": Rule(("sync:write",), actors=(OWNER,)),
    # The batch settles: every item as its single mutation's rule.
    "claimOperations": Rule(OPS_WRITE, actors=(ITEM_CALLER, ITEM_OWNER)),
    "markSendsStarted": Rule(OPS_WRITE, actors=(ITEM_CALLER,)),
    "recordOperations": Rule(OPS_WRITE, actors=(ITEM_CALLER,)),
    "finalizeOperations": Rule(OPS_WRITE, actors=(ITEM_CALLER,)),
    "recordVerifications": Rule(("watches:write",), actors=(ITEM_WATCH_OWNER,)),
    "leaseOperations": Rule(OPS_WRITE, rows="the viewer's calls (store filter)"),
    # Every key as renewLease's and releaseLease's rule (the store filters by caller too).
    "renewLeases": Rule(OPS_WRITE, actors=(KEY_CALLER,)),
    "releaseLeases": Rule(OPS_WRITE, actors=(KEY_CALLER,)),
    "claimWatches": Rule(("watches:write",), rows="owner (store filter)"),
    # The operator controls: every tenant's rows, by account, filter or key.
    "setAccountLimit": Rule((OPERATOR,)),
    "throttleAccount": Rule((OPERATOR,)),
    "liftThrottle": Rule((OPERATOR,)),
    "pauseAccount": Rule((OPERATOR,)),
    "resumeAccount": Rule((OPERATOR,)),
    "cancelOperations": Rule((OPERATOR,)),
    "reissueOperations": Rule((OPERATOR,)),
    "rearmWatches": Rule((OPERATOR,)),
    "forceReleaseLeases": Rule((OPERATOR,)),
}
SUBSCRIPTION_RULES: dict[str, Rule] = {
    # A wake-up names a connector and no row, but says that some tenant's work is due: a
    # service's to hear, as `dueOperations` is a service's to read.
    "workAvailable": Rule((SERVICE,), rows="no row: a connector's name"),
    "operationEvents": Rule(OPS_READ, rows="caller or owner (store filter)"),
    "watchEvents": Rule(("watches:read",), rows="owner (store filter)"),
}
RULES: dict[str, dict[str, Rule]] = {
    "Query": QUERY_RULES,
    "Mutation": MUTATION_RULES,
    "Subscription": SUBSCRIPTION_RULES,
}
OPEN_ROOT_FIELDS = frozenset({"__typename", "__schema", "__type"})


def rule_for(type_name: str, field_name: str) -> Rule:
    """The rule of a root field; ``FORBIDDEN`` for a field that has none (fail closed)."""
    rule = RULES.get(type_name, {}).get(field_name)
    if rule is None:
        raise forbidden(f"{type_name}.{field_name} has no access rule")
    return rule


def permitted(viewer: Viewer, type_name: str) -> list[str]:
    """The root fields of ``type_name`` whose rule's scopes the viewer holds, in the rules'
    order (a field with ``actors`` is permitted for the viewer's own rows)."""
    return [
        name
        for name, rule in RULES.get(type_name, {}).items()
        if all(scope in viewer.scopes for scope in rule.scopes)
    ]


def arguments(kwargs: dict[str, Any], path: tuple[str, ...]) -> list[tuple[str | None, Any]]:
    """Each value at ``path`` in a field's coerced arguments (nested dicts; ``EACH`` walks
    every item of a list), with the field it names when the path crosses a list: the
    item and the innermost field (``items[3].callerDID``), else None."""
    found: list[tuple[str | None, Any]] = [(None, kwargs)]
    for at, part in enumerate(path):
        step: list[tuple[str | None, Any]] = []
        for field, value in found:
            if part == EACH:
                items = value if isinstance(value, list) else [None]
                step.extend(
                    (f"{path[at - 1]}[{index}].{path[-1]}", item)
                    for index, item in enumerate(items)
                )
            else:
                step.append((field, value.get(part) if isinstance(value, dict) else None))
        found = step
    return found


def authorize(viewer: Viewer, type_name: str, field_name: str, kwargs: dict[str, Any]) -> None:
    """Apply the rule of a root field to its arguments; raise ``FORBIDDEN`` when denied, naming
    in ``extensions.field`` the input field refused (``callerDID``, ``items[3].callerDID``)."""
    rule = rule_for(type_name, field_name)
    for scope in rule.scopes:
        require(viewer, scope)
    for actor in rule.actors:
        for field, did in arguments(kwargs, actor):
            if not isinstance(did, str):
                raise forbidden(f"{field_name}: no DID to check at {field or '.'.join(actor)}")
            named = field or actor[-1]
            assert_acts_as(viewer, did, named, named)


def is_root(info: GraphQLResolveInfo[Any]) -> bool:
    """The field being resolved is a field of one of the schema's root types."""
    schema = info.schema
    return info.parent_type in (schema.query_type, schema.mutation_type, schema.subscription_type)


def authorize_field(info: GraphQLResolveInfo[Any], kwargs: dict[str, Any]) -> None:
    """Apply the rule of the root field ``info`` resolves (any root type; meta fields such
    as ``__typename`` are open) for the context's viewer; raise ``FORBIDDEN`` when denied."""
    if is_root(info) and info.field_name not in OPEN_ROOT_FIELDS:
        viewer = getattr(info.context, "viewer", None) or Viewer.anonymous()
        authorize(viewer, info.parent_type.name, info.field_name, kwargs)


class Authorization(SchemaExtension):
    """Checks every root field's rule before its resolver runs."""

    def resolve(
        self, _next: Callable[..., Any], root: Any, info: Any, *args: Any, **kwargs: Any
    ) -> Any:
        authorize_field(info, kwargs)
        return _next(root, info, *args, **kwargs)


def guard_subscriptions(schema: GraphQLSchema) -> None:
    """Wrap the ``subscribe`` function of every field of ``schema``'s ``Subscription`` with
    its rule (``authorize_field``): graphql-core calls it without the resolver middleware,
    and a refused viewer gets the error before any stream starts."""
    if schema.subscription_type is None:
        return
    for field in schema.subscription_type.fields.values():
        if field.subscribe is not None:
            field.subscribe = guarded(field.subscribe)


def guarded(subscribe: Callable[..., Any]) -> Callable[..., Any]:
    """``subscribe`` after the field's rule."""

    @wraps(subscribe)
    def checked(root: Any, info: GraphQLResolveInfo[Any], **kwargs: Any) -> Any:
        authorize_field(info, kwargs)
        return subscribe(root, info, **kwargs)

    return checked
