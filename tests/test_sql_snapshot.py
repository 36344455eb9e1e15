"""The checked-in SQL of every named statement (store/sql/<backend>/<name>.sql) is what the
store's statements compile to: regenerate with ``make sql``."""

import re
from pathlib import Path

import pytest

from store import sql_text


def test_sql_files__match_the_statements() -> None:
    found = sql_text.differences()
    assert not found, "the SQL files are not the statements' SQL; run `make sql`:\n" + "\n".join(
        found
    )


def test_differences__name_a_stale_a_missing_and_a_left_over_file(tmp_path: Path) -> None:
    sql_text.write(tmp_path)
    assert sql_text.differences(tmp_path) == []
    stale = tmp_path / "postgresql" / "leasing.lease_operations.by_owner.sql"
    stale.write_text(stale.read_text().replace("SKIP LOCKED", "NOWAIT"))
    (tmp_path / "sqlite" / "operations.FINALIZE.sql").unlink()
    (tmp_path / "sqlite" / "operations.GONE.sql").write_text("SELECT 1;\n")

    assert sql_text.differences(tmp_path) == [
        "missing: sqlite/operations.FINALIZE.sql",
        "left over: sqlite/operations.GONE.sql",
        "stale: postgresql/leasing.lease_operations.by_owner.sql",
    ]
    assert sorted(sql_text.write(tmp_path)) == [
        "postgresql/leasing.lease_operations.by_owner.sql",
        "sqlite/operations.FINALIZE.sql",
        "sqlite/operations.GONE.sql",
    ]
    assert sql_text.differences(tmp_path) == []


@pytest.mark.parametrize("backend", sql_text.BACKENDS)
def test_layout__changes_only_whitespace(backend: str) -> None:
    for named in sql_text.named_statements():
        for _, prepared in named.steps.get(backend, []):
            sql = sql_text.compiled(prepared, backend, by_name=True).string
            laid_out = sql_text.layout(sql)
            assert re.sub(r"\s+", "", laid_out) == re.sub(r"\s+", "", sql), named.name
            assert laid_out.count("\n") >= sql.count("\n"), named.name


def test_named_statements__one_backend_sets_name_statements_of_that_backend_only() -> None:
    names = {named.name for named in sql_text.named_statements()}
    assert names >= sql_text.POSTGRESQL_ONLY | sql_text.SQLITE_ONLY
    assert not sql_text.POSTGRESQL_ONLY & sql_text.SQLITE_ONLY
    for named in sql_text.named_statements():
        assert named.name not in sql_text.POSTGRESQL_ONLY or "sqlite" not in named.steps
        assert named.name not in sql_text.SQLITE_ONLY or "postgresql" not in named.steps


def test_lease_statement__is_readable_as_sql() -> None:
    text = (sql_text.SQL_DIR / "postgresql" / "leasing.lease_operations.by_owner.sql").read_text()
    assert "FOR UPDATE OF pick SKIP LOCKED" in text
    assert ":p_token" in text and "$1 p_token" in text
    assert max(len(line) for line in text.splitlines()) < len(text) / 10


@pytest.mark.parametrize("backend", sql_text.BACKENDS)
def test_compiled__by_name_is_the_drivers_sql_with_named_parameters(backend: str) -> None:
    # What the files show (:p_now) is what the driver gets ($1, ?) but for the spelling of
    # the parameters: put the driver's spelling back and the two are the same text.
    for named in sql_text.named_statements():
        for _, prepared in named.steps.get(backend, []):
            shown = sql_text.compiled(prepared, backend, by_name=True).string
            sent = sql_text.compiled(prepared, backend, by_name=False)
            order = list(dict.fromkeys(sent.positiontup or ()))
            spelled = {
                name: f"${n}" if backend == "postgresql" else "?"
                for n, name in enumerate(order, start=1)
            }
            back = re.sub(r"(?<!:):(\w+)", lambda m, s=spelled: s[m.group(1)], shown)
            assert back == sent.string, named.name


def test_layout__a_clause_a_line_and_a_subquery_indented() -> None:
    sql = (
        "SELECT a, b, CASE WHEN (x AND y) THEN 1 ELSE 2 END AS c \nFROM t LEFT OUTER JOIN v "
        "ON v.k = t.k AND v.j = 'a, (b' \nWHERE t.x = (SELECT max(y) AS m FROM u WHERE "
        "u.k = t.k AND u.z > 1) AND coalesce(a, b) > 0 ORDER BY a, b FOR UPDATE OF t SKIP LOCKED"
    )
    assert sql_text.layout(sql) == "\n".join(
        [
            "SELECT a,",
            "  b,",
            "  CASE WHEN (x AND y) THEN 1 ELSE 2 END AS c",
            "FROM t",
            "LEFT OUTER JOIN v ON v.k = t.k AND v.j = 'a, (b'",
            "WHERE t.x = (",
            "  SELECT max(y) AS m",
            "  FROM u",
            "  WHERE u.k = t.k",
            "    AND u.z > 1",
            ")",
            "  AND coalesce(a, b) > 0",
            "ORDER BY a, b",
            "FOR UPDATE OF t SKIP LOCKED",
        ]
    )
