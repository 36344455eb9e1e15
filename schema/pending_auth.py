"""``PendingAuth`` and ``ConsumedPendingAuth``: OAuth PKCE state between the authorize
redirect and the callback. Only ``ConsumedPendingAuth`` carries the ``codeVerifier``
secret, and only ``consumePendingAuth`` returns it."""

import strawberry

from schema.records import mirrors, record_values
from schema.scalars import EpochMillis
from store.records import PendingAuthRecord


@strawberry.type(
    description="A pending OAuth authorization (every field but the PKCE `codeVerifier`)."
)
@mirrors(PendingAuthRecord, omit={"code_verifier"})  # the secret: ConsumedPendingAuth's alone
class PendingAuth:
    state: str = strawberry.field(description="The OAuth `state` naming this authorization.")
    incremental: bool = strawberry.field(description="Whether it adds scopes to a grant.")
    expires_at: EpochMillis = strawberry.field(
        description="Expired when `expiresAt < now`; a record at exactly now still counts."
    )

    @classmethod
    def from_record(cls, record: PendingAuthRecord) -> "PendingAuth":
        """The public view of a stored record: the code verifier left out."""
        return cls(**record_values(cls, record))


@strawberry.type(
    description="A pending authorization just consumed (deleted): the only type that "
    "carries the PKCE `codeVerifier`."
)
class ConsumedPendingAuth(PendingAuth):
    code_verifier: str = strawberry.field(description="The PKCE code verifier (a secret).")

    @classmethod
    def from_record(cls, record: PendingAuthRecord) -> "ConsumedPendingAuth":
        """The consumed record, secret included."""
        return cls(**record_values(PendingAuth, record), code_verifier=record.code_verifier)
