"""The store branches on its backend in one place: ``store/dialects.py``.

Every difference between PostgreSQL and SQLite sits behind the ``Dialect`` object
``Database`` holds, so a change to one backend's SQL or course is made, and reviewed, in one
file, and a store module cannot drift into a difference the other backend never got. This
test reads the source of every module of ``store/`` and fails when one outside
``dialects.py`` tests which backend it runs on: reads ``is_postgres``, compares a value with
a backend's name (``"postgresql"``, ``"sqlite"``) or tests a URL's scheme
(``startswith("postgres…")``). Allowed: ``Database.is_postgres``, which hands the dialect's
answer to code outside the store (tests, benchmarks); ``store/urls.py``, which reads which
backend a URL names (the seam's input); and SQLAlchemy's own per-dialect compilation
(``@compiles(…, "postgresql")``, ``with_variant``), which is not a branch of ours. The
migrations (``store/migrations/``) are Alembic's scripts, each frozen as written, and are
not scanned.
"""

import ast
from pathlib import Path

import store

STORE = Path(store.__file__).parent
SEAM = "dialects.py"
URLS = "urls.py"
BACKEND_NAMES = {"postgresql", "postgres", "sqlite"}


def _is_backend_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in BACKEND_NAMES


def _allowed_functions(tree: ast.Module, module: str) -> set[ast.AST]:
    """The nodes inside ``Database.is_postgres`` (database.py), which may read it."""
    if module != "database.py":
        return set()
    inside: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "is_postgres":
            inside |= set(ast.walk(node))
    return inside


def backend_branches(source: str, module: str) -> list[str]:
    """Where ``source`` (the module ``module``) tests its backend: ``line: what``."""
    tree = ast.parse(source)
    allowed = _allowed_functions(tree, module)
    found = []
    for node in ast.walk(tree):
        if node in allowed:
            continue
        if isinstance(node, ast.Attribute) and node.attr == "is_postgres":
            found.append(f"{node.lineno}: reads is_postgres")
        elif isinstance(node, ast.Name) and node.id == "is_postgres":
            found.append(f"{node.lineno}: names is_postgres")
        elif isinstance(node, ast.Compare) and any(
            _is_backend_name(side) for side in [node.left, *node.comparators]
        ):
            found.append(f"{node.lineno}: compares with a backend's name")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and any(
                isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value.startswith(("postgres", "sqlite"))
                for arg in node.args
            )
        ):
            found.append(f"{node.lineno}: tests a URL's scheme")
    return sorted(found, key=lambda where: int(where.split(":")[0]))


def test_store_modules__branch_on_the_backend_only_in_the_dialects() -> None:
    found = [
        f"store/{path.name}:{where}"
        for path in sorted(STORE.glob("*.py"))
        if path.name not in (SEAM, URLS)
        for where in backend_branches(path.read_text(), path.name)
    ]
    assert not found, "backend branches outside store/dialects.py:\n" + "\n".join(found)


def test_backend_branches__finds_each_kind_of_test() -> None:
    source = (
        "def insert(db, url, backend):\n"
        "    if db.is_postgres:\n"
        "        pass\n"
        "    if url.startswith('postgresql'):\n"
        "        pass\n"
        "    if backend == 'sqlite':\n"
        "        pass\n"
        "    return db.dialect.insert\n"
    )
    assert backend_branches(source, "batches.py") == [
        "2: reads is_postgres",
        "4: tests a URL's scheme",
        "6: compares with a backend's name",
    ]


def test_backend_branches__allow_database_is_postgres_only_in_database() -> None:
    source = (
        "class Database:\n"
        "    @property\n"
        "    def is_postgres(self):\n"
        "        return self.dialect.is_postgres\n"
    )
    assert backend_branches(source, "database.py") == []
    assert backend_branches(source, "events.py") == ["4: reads is_postgres"]
