"""docs/deployment.md's online SQLite backups: taken while the store writes (the backup API
and ``VACUUM INTO``, through the ``sqlite3`` shell as documented when it is installed), then
restored and opened: every row committed before the backup is there, and the file is
sound."""

import asyncio
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from store import ConnectorStore
from store.database import Database
from store.operations import OperationClaim
from tests.databases import sqlite_copy


def claim(i: int) -> OperationClaim:
    return OperationClaim(
        caller_did="did:key:backup",
        operation_id=f"op-{i:05d}",
        owner_did="did:key:owner",
        connector_name="calendar",
        model="Event",
        op="update",
        account_key="acct",
        target=f"events/{i}",
        source_id=f"evt-{i}",
        deterministic_event_id=f"det-{i}",
        payload_hash="sha256:x",
        lease_token="lease",
        lease_ms=3_600_000,
    )


def backup_api(source: Path, target: Path) -> None:
    if shutil.which("sqlite3"):
        subprocess.run(["sqlite3", str(source), f".backup '{target}'"], check=True)
        return
    with sqlite3.connect(source) as live, sqlite3.connect(target) as copy:
        live.backup(copy)


def vacuum_into(source: Path, target: Path) -> None:
    if shutil.which("sqlite3"):
        subprocess.run(["sqlite3", str(source), f"VACUUM INTO '{target}'"], check=True)
        return
    with sqlite3.connect(source) as live:
        live.execute("VACUUM INTO ?", (str(target),))


@pytest.mark.parametrize("method", [backup_api, vacuum_into], ids=["backup", "vacuum_into"])
async def test_online_backup_while_writing__restores_every_committed_row(
    sqlite_template_path: Path, tmp_path: Path, method
):
    url = sqlite_copy(sqlite_template_path, tmp_path)
    live_file = Path(url.removeprefix("sqlite+aiosqlite:///"))
    db = Database(url)
    await db.connect()
    store = ConnectorStore(db)
    for i in range(200):
        await store.operations.claim_operation(claim(i))
    writing = True

    async def keep_writing() -> int:
        i = 200
        while writing:
            await store.operations.claim_operation(claim(i))
            i += 1
            await asyncio.sleep(0)
        return i

    writer = asyncio.create_task(keep_writing())
    await asyncio.sleep(0.05)
    backup = tmp_path / "backup.db"
    await asyncio.to_thread(method, live_file, backup)
    writing = False
    written = await writer
    await db.disconnect()

    # Restore: the server is stopped; the live file and its WAL move aside, the backup in.
    restored_dir = tmp_path / "restored"
    restored_dir.mkdir()
    restored = restored_dir / "connector-store.db"
    shutil.copyfile(backup, restored)
    with sqlite3.connect(restored) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db = Database(f"sqlite+aiosqlite:///{restored}")
    await db.connect()
    try:
        store = ConnectorStore(db)
        ids = [
            record.operation_id
            for record in [
                await store.operations.get_operation("did:key:backup", f"op-{i:05d}")
                for i in range(written)
            ]
            if record is not None
        ]
    finally:
        await db.disconnect()
    # Every row before the backup began is there, and the rows are a prefix of the writes.
    assert len(ids) >= 200
    assert ids == [f"op-{i:05d}" for i in range(len(ids))]
    print(f"\n[backup] {method.__name__}: {written} written, {len(ids)} in the backup")


DEPLOYMENT = Path(__file__).parent.parent / "docs" / "deployment.md"


def documented_backups() -> tuple[list[str], list[str]]:
    """The shell commands of docs/deployment.md's online backup block, as written: its first
    paragraph (the setup each backup needs), then each further paragraph (one way to take
    a backup), a command continued with ``\\`` joined to one line."""
    section = DEPLOYMENT.read_text().split("## SQLite: files, backups, restores", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    paragraphs = []
    for paragraph in block.replace("\\\n", " ").split("\n\n"):
        lines = [line for line in paragraph.splitlines() if line and not line.startswith("#")]
        paragraphs.append(" && ".join(lines))
    return [paragraphs[0]], paragraphs[1:]


@pytest.mark.parametrize("way", range(len(documented_backups()[1])))
def test_documented_backup_commands__run_as_written(sqlite_template_path: Path, tmp_path, way):
    """Each documented way, run verbatim by ``sh`` in a folder holding
    ``data/connector-store.db`` (after the block's setup), leaves a sound copy in
    ``backups/``; skipped where its program (``sqlite3``, ``python3``) is not installed."""
    setup, ways = documented_backups()
    command = ways[way]
    if shutil.which(command.split()[0]) is None:
        pytest.skip(f"{command.split()[0]} is not installed")
    (tmp_path / "data").mkdir()
    shutil.copyfile(sqlite_template_path, tmp_path / "data" / "connector-store.db")

    done = subprocess.run(
        ["sh", "-c", " && ".join([*setup, command])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    [copy] = (tmp_path / "backups").iterdir()
    with sqlite3.connect(copy) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert check.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
