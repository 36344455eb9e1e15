"""The linear-time measure of a document's expanded shape."""

from graphql import parse

from server.query_limits import Limits, Shape, measure


def test_measure__fields_depth_and_aliases():
    shape = measure(parse("{ a: serverTime operations { edges { node { id watch { id } } } } }"))
    assert shape == Shape(depth=5, fields=7, aliases=1)


def test_measure__fragments_expanded_once_each_and_largest_operation_wins():
    document = parse(
        "query Small { serverTime } "
        "query Big { ...F ...F ... on Query { ...F } } "
        "fragment F on Query { x: serverTime y: serverTime }"
    )
    assert measure(document) == Shape(depth=1, fields=6, aliases=6)


def test_measure__introspection_fields_add_no_depth():
    assert measure(parse("{ __schema { types { fields { name } } } }")).depth == 0


def test_measure__cyclic_and_unknown_fragments_count_as_empty():
    document = parse("{ ...A ...Missing } fragment A on Query { ...A serverTime }")
    assert measure(document) == Shape(depth=1, fields=1, aliases=0)


def test_limits__problems_name_each_exceeded_measure():
    limits = Limits(depth=2, fields=3, aliases=0)
    assert limits.problems(Shape(2, 3, 0)) == []
    assert len(limits.problems(Shape(3, 4, 1))) == 3
