"""The repository explains itself: no file cites a document that is not in it, every
citation of a heading of its own documents (``docs/api.md, 'Live updates'``) and every relative
link in README.md, docs/ and benchmarks/ lands on a file and heading that exist, and the code
names that docs/architecture.md and docs/worker-protocol.md mention exist."""

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

VENDORED = re.compile(
    r"server/static/graphiql/.*"
    r"|server/static/ui/(LICENSE\..*|VERSIONS\.md|.*\.min\.js|htm-preact-standalone\.module\.js)"
    r"|tests/ui/vendor/(LICENSE\..*|.*\.min\.js)"
    r"|.*package-lock\.json"
)
"""Files written elsewhere and kept as they came (their licenses cite their own sections)."""

BRIEF = "DESIG" + "N"
"""The name of the brief the project started from, which is not in the repository (spelled in
two parts so that this file does not cite it)."""
OUTSIDE_DOCUMENT = re.compile(rf"\b{BRIEF}\b|\b{BRIEF.lower()}\.md\b|\b[Ss]ections?\s+\d|§\s*\d")
"""A citation of the brief, or of a numbered section of some document."""
CITATION = re.compile(
    r"((?:docs/|benchmarks/)?(?:[\w-]+/)*[\w.-]+\.md),\s+'(.{1,80}?)'(?=[\s);,.:`]|$)", re.S
)
"""``docs/runbook.md, 'Operator controls'``: a heading of one of the repository's documents."""
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SPECIFIED_BY = re.compile(r'@specifiedBy\(url: "([^"]+)"\)')
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]+`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)
LINKED_DOCUMENTS = (
    "README.md",
    "docs/*.md",
    "docs/decisions/*.md",
    "benchmarks/*.md",
    "benchmarks/results/*.md",
)
NAMED_CODE = ("docs/architecture.md", "docs/worker-protocol.md")
CODE_SUFFIXES = (".py", ".graphql", ".js", ".mako")


def tracked_files() -> list[str]:
    """The repository's files: git's list when this is a checkout, else every file under the
    root but caches, virtualenvs and local data."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        skipped = {".git", ".venv", "data", "node_modules", "__pycache__"}
        return [
            str(path.relative_to(ROOT))
            for path in ROOT.rglob("*")
            if path.is_file()
            and not skipped.intersection(path.relative_to(ROOT).parts)
            and not any(part.endswith("_cache") for part in path.relative_to(ROOT).parts)
        ]
    return [name for name in listed.split("\0") if name]


def texts() -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every tracked file that is text and not vendored."""
    for name in tracked_files():
        path = ROOT / name
        if VENDORED.fullmatch(name) or not path.is_file():
            continue
        try:
            yield name, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def prose(markdown: str) -> str:
    """``markdown`` without its fenced code blocks."""
    return FENCE.sub("", markdown)


def plain(heading: str) -> str:
    """A heading's words as a citation quotes them: no backticks, spaces collapsed."""
    return " ".join(heading.replace("`", "").split())


def headings(path: Path) -> list[str]:
    return [plain(heading) for heading in HEADING.findall(prose(path.read_text()))]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives ``path``'s headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(path):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def linked_documents() -> list[Path]:
    return sorted({path for pattern in LINKED_DOCUMENTS for path in ROOT.glob(pattern)})


def broken_link(source: Path, target: str) -> str | None:
    """Why ``target``, linked from ``source``, lands nowhere; None when it lands."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target):
        return None
    location, _, anchor = target.partition("#")
    path = (source.parent / location).resolve() if location else source
    if not path.exists():
        return f"{location} does not exist"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"{path.relative_to(ROOT)} has no heading #{anchor}"
    return None


def test_no_file_cites_a_document_outside_the_repository() -> None:
    cited = [
        f"{name}:{text.count(chr(10), 0, match.start()) + 1}: {match.group()}"
        for name, text in texts()
        for match in OUTSIDE_DOCUMENT.finditer(text)
    ]
    assert cited == []


def test_citations_name_headings_that_exist() -> None:
    wrong = []
    for name, text in texts():
        for match in CITATION.finditer(text):
            document, heading = match.group(1), plain(match.group(2))
            path = ROOT / document
            if not path.is_file():
                wrong.append(f"{name}: {document} does not exist")
            elif heading not in headings(path):
                wrong.append(f"{name}: {document} has no heading {heading!r}")
    assert wrong == []


@pytest.mark.parametrize("path", linked_documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_land(path: Path) -> None:
    text = INLINE_CODE.sub("", prose(path.read_text()))
    broken = [
        f"{target}: {why}"
        for target in LINK.findall(text)
        if (why := broken_link(path, target)) is not None
    ]
    assert broken == []


def test_schema_specified_by_links_land() -> None:
    schema = ROOT / "graphql" / "schema.graphql"
    targets = SPECIFIED_BY.findall(schema.read_text())
    assert "docs/scalars.md#epochmillis" in targets
    broken = [
        f"{target}: {why}"
        for target in targets
        if (why := broken_link(ROOT / "README.md", target)) is not None
    ]
    assert broken == []


def code_words() -> set[str]:
    words: set[str] = set()
    for name, text in texts():
        if name.endswith(CODE_SUFFIXES):
            words.update(re.findall(r"[A-Za-z_]\w*", text))
    return words


@pytest.mark.parametrize("document", NAMED_CODE)
def test_code_names_in_docs_exist(document: str) -> None:
    """Each backticked identifier (``Hub``, ``lease_guards.unpaused``, ``fair_order()``) is a
    word of the code, and each backticked path (``store/leasing.py``) a file."""
    words = code_words()
    text = prose((ROOT / document).read_text())
    stale = []
    for quoted in sorted(set(re.findall(r"`([^`\n]+)`", text))):
        name = quoted.removesuffix("()")
        if re.fullmatch(r"[\w./-]+\.(py|graphql|md|js|html|css|toml)", name):
            if not (ROOT / name).exists():
                stale.append(quoted)
        elif re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name) and any(
            part not in words for part in name.split(".")
        ):
            stale.append(quoted)
    assert stale == []
