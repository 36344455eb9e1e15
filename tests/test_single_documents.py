"""graphql/documents/ holds each operation of graphql/operations/ as its own document (what
``connector-store documents`` writes), each valid against the client SDL on its own."""

from pathlib import Path

import pytest
from graphql import OperationDefinitionNode, build_schema, parse, validate

from server.single_documents import single_operation_documents, write

GRAPHQL = Path(__file__).resolve().parents[1] / "graphql"
DOCUMENTS = GRAPHQL / "documents"


def test_documents__checked_in_match_what_the_command_writes(tmp_path):
    (tmp_path / "Stale.graphql").write_text("query Stale { serverTime }\n")

    write(GRAPHQL / "operations", tmp_path)

    written = {path.name: path.read_text() for path in tmp_path.glob("*.graphql")}
    checked_in = {path.name: path.read_text() for path in DOCUMENTS.glob("*.graphql")}
    assert written == checked_in, "stale: run `make schema` and commit graphql/documents"


@pytest.mark.parametrize("path", sorted(DOCUMENTS.glob("*.graphql")), ids=lambda p: p.stem)
def test_documents__one_operation_each_valid_alone(path):
    document = parse(path.read_text())
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]

    assert [operation.name.value for operation in operations if operation.name] == [path.stem]
    assert validate(build_schema((GRAPHQL / "client-schema.graphql").read_text()), document) == []


def test_single_operation_documents__fragments_followed_through_fragments(tmp_path):
    source = tmp_path / "a.graphql"
    source.write_text(
        "query A { operations(first: 1) { edges { node { ...Outer } } } }\n"
        "query B { serverTime }\n"
        "fragment Outer on Operation { ...Inner }\n"
        "fragment Inner on Operation { operationID }\n"
        "fragment Unused on Operation { state }\n"
    )

    documents = single_operation_documents([source])

    assert sorted(documents) == ["A", "B"]
    assert "fragment Outer" in documents["A"] and "fragment Inner" in documents["A"]
    assert "Unused" not in documents["A"] and "fragment" not in documents["B"]


def test_single_operation_documents__a_name_defined_twice_refused(tmp_path):
    (tmp_path / "a.graphql").write_text("query A { serverTime }\n")
    (tmp_path / "b.graphql").write_text("query A { serverTime }\n")

    with pytest.raises(ValueError, match="operation A is defined twice"):
        single_operation_documents(tmp_path.glob("*.graphql"))
