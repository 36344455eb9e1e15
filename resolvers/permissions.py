"""The one place rights are checked: scopes, and which operations a viewer sees."""

from dataclasses import dataclass

from graphql import GraphQLError

SERVICE = "service"
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
    """Who is asking: ``did`` (None for an anonymous service) and the rights it holds."""

    did: str | None
    scopes: frozenset[str]

    @classmethod
    def service(cls) -> "Viewer":
        """A viewer holding every right (the server runs without authentication for now)."""
        return cls(did=None, scopes=ALL_SCOPES)

    @property
    def is_service(self) -> bool:
        """True when the viewer sees every operation."""
        return SERVICE in self.scopes

    @property
    def visible_to(self) -> str | None:
        """The DID an operation must be called or owned by, or None for a service."""
        return None if self.is_service else self.did


def require(viewer: Viewer, scope: str) -> None:
    """Raise ``FORBIDDEN`` unless the viewer holds ``scope``."""
    if scope not in viewer.scopes:
        raise GraphQLError(f"this requires the right {scope!r}", extensions={"code": "FORBIDDEN"})


def can_see(viewer: Viewer, caller_did: str, owner_did: str) -> bool:
    """True when the viewer may see an operation of this caller and owner."""
    return viewer.is_service or viewer.did in (caller_did, owner_did)


def can_see_watch(viewer: Viewer, owner_did: str) -> bool:
    """True when the viewer may see a watch of this owner: a service, or the owner."""
    return viewer.is_service or viewer.did == owner_did
