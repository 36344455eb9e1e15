"""The one place rights are checked: scopes, and which rows a viewer may see and write.

Every root field has a ``Rule`` in ``RULES``; ``Authorization`` (a schema extension) applies
it before the field's resolver runs, and refuses a root field that has none. A rule names
the scopes the field needs and, for a write, the input arguments holding the DIDs the
viewer must be (``actors``): a viewer without ``service`` writes only its own rows, checked
before anything is written (a claim names the viewer as caller and as owner, since the
owner's watch is what finalize arms). Every row a resolver or a nested field returns goes
through the viewer-scoped reader ``resolvers.visible.Visible`` (after the store filters
built from ``Viewer.visible_to``), so a row of another tenant reads as null, or is absent
from a list.

Lease tokens: a non-service viewer sees an operation's ``leaseToken`` only when it is the
operation's caller (the one that holds and presents the lease); an owner that is not the
caller reads ``leaseToken: null``.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphql import GraphQLError
from strawberry.extensions import SchemaExtension

from resolvers.codes import FORBIDDEN

SERVICE = "service"
METRICS_SCOPE = "metrics"
"""The right to scrape ``/metrics`` (a ``service`` token may too); no GraphQL field needs it."""
ALL_SCOPES = frozenset(
    {
        "operations:read",
        "operations:write",
        "watches:read",
        "watches:write",
        "auth:write",
        "sync:read",
        "sync:write",
        SERVICE,
    }
)


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
        """The viewer a token's ``sub`` and space-separated ``scope`` name; ``service``
        implies every right."""
        scopes = frozenset(scope.split())
        return cls(did=sub, scopes=ALL_SCOPES if SERVICE in scopes else scopes)

    @classmethod
    def anonymous(cls) -> "Viewer":
        """A viewer holding no right (a request that reached the schema without a token)."""
        return cls(did=None, scopes=frozenset())

    @property
    def is_service(self) -> bool:
        """True when the viewer acts for every tenant."""
        return SERVICE in self.scopes

    @property
    def visible_to(self) -> str | None:
        """The DID a row must belong to, or None for a service (every row)."""
        return None if self.is_service else (self.did or "")


def forbidden(message: str) -> GraphQLError:
    return GraphQLError(message, extensions={"code": FORBIDDEN})


def require(viewer: Viewer, scope: str) -> None:
    """Raise ``FORBIDDEN`` unless the viewer holds ``scope``."""
    if scope not in viewer.scopes:
        raise forbidden(f"this requires the right {scope!r}")


def can_see(viewer: Viewer, caller_did: str, owner_did: str) -> bool:
    """True when the viewer may see an operation of this caller and owner."""
    return viewer.is_service or (viewer.did is not None and viewer.did in (caller_did, owner_did))


def owns(viewer: Viewer, owner_did: str) -> bool:
    """True when the viewer may see a row (watch, sync state, pending auth) of this owner."""
    return viewer.is_service or (viewer.did is not None and viewer.did == owner_did)


def can_see_lease(viewer: Viewer, caller_did: str) -> bool:
    """True when the viewer may see the lease token of an operation of this caller."""
    return viewer.is_service or (viewer.did is not None and viewer.did == caller_did)


def assert_acts_as(viewer: Viewer, did: str, what: str) -> None:
    """Raise ``FORBIDDEN`` unless the viewer is a service or ``did`` itself."""
    if not owns(viewer, did):
        raise forbidden(f"{what} must be the token's subject (or the token needs 'service')")


@dataclass(frozen=True, slots=True)
class Rule:
    """What a root field needs: every scope in ``scopes``; for a write, ``actors`` are the
    paths of the input arguments (GraphQL names, as coerced) that must each equal the
    viewer's DID unless the viewer is a service. ``rows`` says how the resolver narrows what
    it returns."""

    scopes: tuple[str, ...]
    actors: tuple[tuple[str, ...], ...] = ()
    rows: str = ""


OPS_READ = ("operations:read",)
OPS_WRITE = ("operations:write",)
CALLER = ("input", "callerDID")
WATCH_OWNER = ("input", "identity", "ownerDID")
OWNER = ("input", "ownerDID")

QUERY_RULES: dict[str, Rule] = {
    "serverTime": Rule(()),
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
    # Provider accounts are shared by every owner: a service's to read (and, once it
    # exists, an operator's).
    "accounts": Rule((SERVICE,)),
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
    "leaseOperations": Rule(OPS_WRITE, rows="the viewer's calls (store filter)"),
    "renewLeases": Rule(OPS_WRITE, rows="the viewer's calls (store filter)"),
    "releaseLeases": Rule(OPS_WRITE, rows="the viewer's calls (store filter)"),
    "claimWatches": Rule(("watches:write",), rows="owner (store filter)"),
    "setAccountLimit": Rule((SERVICE,)),
    "throttleAccount": Rule((SERVICE,)),
}
RULES: dict[str, dict[str, Rule]] = {"Query": QUERY_RULES, "Mutation": MUTATION_RULES}
OPEN_ROOT_FIELDS = frozenset({"__typename", "__schema", "__type"})


def rule_for(type_name: str, field_name: str) -> Rule:
    """The rule of a root field; ``FORBIDDEN`` for a field that has none (fail closed)."""
    rule = RULES.get(type_name, {}).get(field_name)
    if rule is None:
        raise forbidden(f"{type_name}.{field_name} has no access rule")
    return rule


def argument(kwargs: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value at ``path`` in a field's coerced arguments (nested dicts)."""
    value: Any = kwargs
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def authorize(viewer: Viewer, type_name: str, field_name: str, kwargs: dict[str, Any]) -> None:
    """Apply the rule of a root field to its arguments; raise ``FORBIDDEN`` when denied."""
    rule = rule_for(type_name, field_name)
    for scope in rule.scopes:
        require(viewer, scope)
    for actor in rule.actors:
        did = argument(kwargs, actor)
        if not isinstance(did, str):
            raise forbidden(f"{field_name}: no DID to check at {'.'.join(actor)}")
        assert_acts_as(viewer, did, actor[-1])


class Authorization(SchemaExtension):
    """Checks every root field's rule before its resolver runs."""

    def resolve(
        self, _next: Callable[..., Any], root: Any, info: Any, *args: Any, **kwargs: Any
    ) -> Any:
        parent = info.parent_type.name
        if parent in RULES and info.field_name not in OPEN_ROOT_FIELDS:
            viewer = getattr(info.context, "viewer", None) or Viewer.anonymous()
            authorize(viewer, parent, info.field_name, kwargs)
        return _next(root, info, *args, **kwargs)
