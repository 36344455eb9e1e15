"""The ``Viewer`` type: who the request's token names and what it may do."""

import strawberry


@strawberry.type(
    name="Viewer",
    description="The token's subject and rights, and the root mutations they permit (a "
    "dashboard shows only the actions a token may use).",
)
class ViewerInfo:
    did: str | None = strawberry.field(description="The token's subject (its `sub`).")
    scopes: list[str] = strawberry.field(
        description="The token's rights, with those its scopes imply (`service` every one; "
        "`operator` the `observer`'s), sorted."
    )
    mutations: list[str] = strawberry.field(
        description="The root mutation fields these rights permit, sorted (a field "
        "that takes DIDs is permitted for the viewer's own rows)."
    )
