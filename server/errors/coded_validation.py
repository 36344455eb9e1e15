"""``CodedValidation``: the validation rules, each swapped for its coded twin."""

from collections.abc import Iterator
from functools import cache

from graphql import ASTValidationRule
from strawberry.extensions import SchemaExtension

from resolvers.taking import TakesLast
from server.errors.rules import coded_rule


class CodedValidation(SchemaExtension):
    """Adds the API's own rule (``resolvers.taking.TakesLast``) to the validation rules and
    swaps each for its ``coded_rule``, so every validation error is born with its code (its
    place in the pipeline: ``server.pipeline``)."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        context.validation_rules = coded_rules(tuple(context.validation_rules))
        yield


@cache
def coded_rules(
    rules: tuple[type[ASTValidationRule], ...],
) -> tuple[type[ASTValidationRule], ...]:
    """``rules`` and ``TakesLast``, each swapped for its ``coded_rule``: worked out once per
    list of rules (a request's are Strawberry's, with introspection's rule or not)."""
    return tuple(coded_rule(rule) for rule in (*rules, TakesLast))
