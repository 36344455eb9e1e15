"""Where a request may take work: the validation rule ``TakesLast``.

A mutation may hold at most one taking field (``TAKING_FIELDS``), and it must be its last root
field (``__typename`` aside); otherwise the document is refused with
``GRAPHQL_VALIDATION_FAILED`` before anything runs. The document is checked as written: a field
under ``@skip``/``@include`` counts as present. Why:
docs/decisions/0018-a-taking-field-is-its-mutations-last.md.
"""

from typing import Any, Final

from graphql import (
    FieldNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    ValidationRule,
)

TAKING_FIELDS: Final = frozenset({"leaseOperations", "claimWatches"})
"""The ``Mutation`` fields whose answer is the only record of what they took."""


class TakesLast(ValidationRule):
    """Refuses a mutation with two taking fields, or with a root field after one
    (``GRAPHQL_VALIDATION_FAILED``, naming the field by its response name)."""

    def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
        if node.operation != OperationType.MUTATION:
            return
        fields = self.root_fields(node.selection_set, set())
        names = list(dict.fromkeys(response_name(field) for field in fields))
        taking = [field for field in fields if field.name.value in TAKING_FIELDS]
        for field in taking:
            name = response_name(field)
            if name != names[-1] or len({response_name(f) for f in taking}) > 1:
                self.report_error(
                    GraphQLError(
                        f"{name}: {field.name.value} hands out work only its answer "
                        "shows, so it must be the last root field of its mutation and the "
                        "only one of "
                        + ", ".join(sorted(TAKING_FIELDS))
                        + "; send the other fields in a request of their own",
                        field,
                    )
                )
                return

    def root_fields(self, selections: SelectionSetNode, spread: set[str]) -> list[FieldNode]:
        """The root fields of ``selections`` in execution order, every fragment expanded
        once; ``__typename`` left out."""
        found: list[FieldNode] = []
        for selection in selections.selections:
            if isinstance(selection, FieldNode):
                if selection.name.value != "__typename":
                    found.append(selection)
            elif isinstance(selection, InlineFragmentNode):
                found += self.root_fields(selection.selection_set, spread)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                fragment = self.context.get_fragment(name)
                if fragment is not None and name not in spread:
                    spread.add(name)
                    found += self.root_fields(fragment.selection_set, spread)
        return found


def response_name(field: FieldNode) -> str:
    """The key a field's answer has in ``data``: its alias, or its name."""
    return (field.alias or field.name).value
