"""``PendingAuth`` and ``ConsumedPendingAuth``: OAuth PKCE state between the authorize
redirect and the callback. Only ``ConsumedPendingAuth`` carries the ``codeVerifier``
secret, and only ``consumePendingAuth`` returns it."""

import strawberry

from schema.records import from_record
from schema.scalars import EpochMillis
from store.records import PendingAuthRecord


@strawberry.type(
    description="A pending OAuth authorization (every field but the PKCE `codeVerifier`)."
)
class PendingAuth:
    state: str = strawberry.field(description="The OAuth `state` naming this authorization.")
    provider: str
    owner_did: str
    owner_wrappable_did: str | None
    controller_wrappable_did: str | None
    created_at: EpochMillis
    redirect_url: str
    scopes: list[str]
    incremental: bool = strawberry.field(description="Whether it adds scopes to a grant.")
    expires_at: EpochMillis = strawberry.field(
        description="Expired when `expiresAt < now`; a record at exactly now still counts."
    )

    @classmethod
    def from_record(cls, record: PendingAuthRecord) -> "PendingAuth":
        """The public view of a stored record: the code verifier left out."""
        return from_record(cls, record)


@strawberry.type(
    description="A pending authorization just consumed (deleted): the only type that "
    "carries the PKCE `codeVerifier`."
)
class ConsumedPendingAuth(PendingAuth):
    code_verifier: str = strawberry.field(description="The PKCE code verifier (a secret).")

    @classmethod
    def from_record(cls, record: PendingAuthRecord) -> "ConsumedPendingAuth":
        """The consumed record, secret included."""
        return from_record(cls, record)
