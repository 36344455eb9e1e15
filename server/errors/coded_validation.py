"""``CodedValidation``: the validation rules, each swapped for its coded twin."""

from collections.abc import Iterator

from strawberry.extensions import SchemaExtension

from resolvers.taking import TakesLast
from server.errors.rules import coded_rule


class CodedValidation(SchemaExtension):
    """Adds the API's own rule (``resolvers.taking.TakesLast``) to the validation rules and
    swaps each for its ``coded_rule``, so every validation error is born with its code (its
    place in the pipeline: ``server.pipeline``)."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        rules = (*context.validation_rules, TakesLast)
        context.validation_rules = tuple(coded_rule(rule) for rule in rules)
        yield
