"""The name converter: snake_case Python names become the seed's camelCase spelling."""

from strawberry.schema.name_converter import NameConverter

ACRONYMS = {"did": "DID", "dids": "DIDs", "id": "ID", "ids": "IDs", "url": "URL"}


def to_graphql_name(python_name: str) -> str:
    """``caller_did`` → ``callerDID``, ``document_ids`` → ``documentIDs``, ``node_key`` →
    ``nodeKey``; a leading word is kept as written (``id`` stays ``id``)."""
    first, *rest = python_name.split("_")
    return first + "".join(ACRONYMS.get(part, part.capitalize()) for part in rest)


class SeedNameConverter(NameConverter):
    """Applies ``to_graphql_name`` to every field and argument name."""

    def apply_naming_config(self, name: str) -> str:
        return to_graphql_name(name)
