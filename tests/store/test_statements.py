"""store/statements.py: the one SQLAlchemy internal it relies on (``shape_key``), pinned;
statements built per call and ``Prepared`` ones bound alike."""

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg as postgresql_asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite as sqlite_aiosqlite

from store.statements import CompiledStatements, Prepared, param, shape_key
from store.tables import operation as op

DIALECTS = [sqlite_aiosqlite.dialect(), postgresql_asyncpg.dialect()]
ROOT = Path(__file__).resolve().parents[2]


def by_key(caller: str, operation: str) -> sa.Select[tuple[str]]:
    return sa.select(op.c.state).where(op.c.caller_did == caller, op.c.operation_id == operation)


def test_shape_key__same_shape_other_values_share_the_key_and_carry_their_values():
    first, second = shape_key(by_key("a", "b")), shape_key(by_key("c", "d"))

    assert first is not None and second is not None
    assert first.key == second.key
    assert [bind.effective_value for bind in first.bindparams] == ["a", "b"]
    assert [bind.effective_value for bind in second.bindparams] == ["c", "d"]
    other = shape_key(sa.select(op.c.state).where(op.c.caller_did == "a"))
    assert other is not None and other.key != first.key


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_compiled_statements__second_shape_reuses_the_compile_with_its_own_values(dialect):
    compile_ = CompiledStatements(dialect)

    sql_1, values_1 = compile_(by_key("a", "b"))
    sql_2, values_2 = compile_(by_key("c", "d"))

    assert sql_1 == sql_2 and values_1 == ["a", "b"] and values_2 == ["c", "d"]
    in_list, values = compile_(sa.select(op.c.state).where(op.c.caller_did.in_(["x", "y"])))
    assert values == ["x", "y"] and in_list.count("?" if dialect.name == "sqlite" else "$") == 2


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_prepared__binds_per_call_values_by_name_and_keeps_build_time_literals(dialect):
    statement = Prepared(
        lambda _: (
            sa.update(op)
            .where(op.c.caller_did == param("p_caller", op.c.caller_did))
            .values(send_marker=sa.literal("*fixed*"), updated_at=param("p_now", op.c.updated_at))
        )
    )

    _, values = statement.bind(dialect, {"p_caller": "a", "p_now": 7})

    assert sorted(map(str, values)) == sorted(["a", "7", "*fixed*"])
    with pytest.raises(KeyError):
        statement.bind(dialect, {"p_caller": "a"})


def test_private_sqlalchemy_api__used_only_by_shape_key():
    private = re.compile(r"\._generate_cache_key|_bind_processors|_check=")
    users = sorted(
        str(path.relative_to(ROOT))
        for layer in ("store", "server", "resolvers", "schema")
        for path in (ROOT / layer).rglob("*.py")
        if private.search(path.read_text())
    )
    assert users == ["store/statements.py"]
    assert len(private.findall((ROOT / "store/statements.py").read_text())) == 1
