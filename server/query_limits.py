"""Query limits checked in time linear in the document, before validation runs.

Strawberry's depth and alias limiters walk every expansion of every fragment spread, so a
one-kilobyte document whose fragments each spread the next one twice takes hours to check.
Here each fragment is measured once and its measure reused wherever it is spread, so
the expanded size of any document is known at once, however large it would be.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)
from strawberry.extensions import SchemaExtension

from resolvers.codes import GRAPHQL_VALIDATION_FAILED


@dataclass(frozen=True, slots=True)
class Shape:
    """What a selection expands to: its deepest nesting of fields (introspection fields
    not counted), and how many fields and aliased fields it holds once every fragment is
    spread."""

    depth: int = 0
    fields: int = 0
    aliases: int = 0

    def beside(self, other: "Shape") -> "Shape":
        """Two selections side by side."""
        return Shape(
            max(self.depth, other.depth), self.fields + other.fields, self.aliases + other.aliases
        )


class ShapeMeter:
    """Measures the operations of one document, each fragment once."""

    def __init__(self, document: DocumentNode) -> None:
        self.fragments = {
            node.name.value: node
            for node in document.definitions
            if isinstance(node, FragmentDefinitionNode)
        }
        self.measured: dict[str, Shape] = {}
        self.measuring: set[str] = set()

    def fragment(self, name: str) -> Shape:
        """A fragment's shape; an unknown or cyclic one counts as empty (validation will
        refuse it)."""
        if name in self.measured:
            return self.measured[name]
        definition = self.fragments.get(name)
        if definition is None or name in self.measuring:
            return Shape()
        self.measuring.add(name)
        shape = self.selections(definition.selection_set)
        self.measuring.discard(name)
        self.measured[name] = shape
        return shape

    def selections(self, selection_set: SelectionSetNode | None) -> Shape:
        """The shape of a selection set."""
        total = Shape()
        for selection in selection_set.selections if selection_set else ():
            if isinstance(selection, FieldNode):
                inner = self.selections(selection.selection_set)
                introspection = selection.name.value.startswith("__")
                total = total.beside(
                    Shape(
                        0 if introspection else inner.depth + 1,
                        inner.fields + 1,
                        inner.aliases + (selection.alias is not None),
                    )
                )
            elif isinstance(selection, InlineFragmentNode):
                total = total.beside(self.selections(selection.selection_set))
            elif isinstance(selection, FragmentSpreadNode):
                total = total.beside(self.fragment(selection.name.value))
        return total

    def largest_operation(self, document: DocumentNode) -> Shape:
        """The largest of each measure over the document's operations."""
        shapes = [
            self.selections(node.selection_set)
            for node in document.definitions
            if isinstance(node, OperationDefinitionNode)
        ]
        return Shape(
            max((shape.depth for shape in shapes), default=0),
            max((shape.fields for shape in shapes), default=0),
            max((shape.aliases for shape in shapes), default=0),
        )


def measure(document: DocumentNode) -> Shape:
    """The largest expanded shape of any operation in ``document``, in linear time."""
    return ShapeMeter(document).largest_operation(document)


MEASURED_ENTRIES = 256
_measured: dict[int, tuple[DocumentNode, Shape]] = {}


def measure_once(document: DocumentNode) -> Shape:
    """``measure(document)``, kept per document object: the document cache hands the same
    parsed document to every request with the same text, so each is measured once. Keyed
    by identity (the entry holds the document, so its id stays its own); at most
    ``MEASURED_ENTRIES`` kept."""
    entry = _measured.get(id(document))
    if entry is not None and entry[0] is document:
        return entry[1]
    shape = measure(document)
    if len(_measured) >= MEASURED_ENTRIES:
        _measured.clear()
    _measured[id(document)] = (document, shape)
    return shape


@dataclass(frozen=True, slots=True)
class Limits:
    """The most depth, expanded fields and aliases one operation may have."""

    depth: int
    fields: int
    aliases: int

    def problems(self, shape: Shape) -> list[str]:
        """What ``shape`` exceeds, in words; empty when it fits."""
        checks = [
            ("depth", shape.depth, self.depth),
            ("fields once fragments are spread", shape.fields, self.fields),
            ("aliases once fragments are spread", shape.aliases, self.aliases),
        ]
        return [
            f"the query has {value} {what}, more than the {limit} allowed"
            for what, value, limit in checks
            if value > limit
        ]


class QueryLimits(SchemaExtension):
    """Refuses a document over its ``Limits`` before any validation rule walks it."""

    def __init__(self, limits: Limits) -> None:
        super().__init__()
        self.limits = limits

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        if context.graphql_document is not None:
            problems = self.limits.problems(measure_once(context.graphql_document))
            if problems:
                context.pre_execution_errors = [
                    GraphQLError(problem, extensions={"code": GRAPHQL_VALIDATION_FAILED})
                    for problem in problems
                ]
        yield
