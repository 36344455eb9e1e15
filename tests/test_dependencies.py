"""Every third-party module the server imports comes from a dependency ``pyproject.toml``
declares by name: a package that arrives only as another's dependency (``cross_web`` with
Strawberry, ``graphql`` with Strawberry, ``asyncpg`` through an extra of ``databases``) can
vanish with that package's next release."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "resolvers", "schema", "store")


def imported_modules(package: str) -> set[str]:
    """The top-level names of every module imported anywhere in ``package`` (in functions
    too), relative imports left out."""
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions() -> set[str]:
    """The names of the runtime dependencies and every extra's, as PEP 503 normalizes them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {
        normalized(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
        for requirement in requirements
    }


def test_imports__every_third_party_module_from_a_declared_distribution():
    imported = set().union(*(imported_modules(package) for package in PACKAGES))
    third_party = imported - set(sys.stdlib_module_names) - set(PACKAGES)
    providers = packages_distributions()
    declared = declared_distributions()
    undeclared = {
        module: providers.get(module, [])
        for module in sorted(third_party)
        if not declared & {normalized(name) for name in providers.get(module, [])}
    }
    assert undeclared == {}
