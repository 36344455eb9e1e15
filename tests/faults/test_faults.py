"""Faults survived, with real server processes (marked ``faults``: ``make test-faults``).

Each test prints its counts (run with ``-s`` to see them).
"""

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from store.migrate import upgrade
from tests.databases import PostgresRun, postgres_admin_url
from tests.faults.harness import (
    Ledger,
    Server,
    WorkerPlan,
    call,
    check_exactly_once,
    run_workers,
    seed,
    service_client,
    wait_all_committed,
)
from tests.ports import free_port

pytestmark = pytest.mark.faults

OPERATIONS_MANY = int(os.environ.get("FAULTS_OPERATIONS", "2000"))


def report(name: str, counts: dict[str, object]) -> None:
    print(f"\n[faults] {name}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


@pytest.fixture
async def fresh_postgres() -> AsyncIterator[PostgresRun]:
    """A PostgreSQL database of its own, migrated, dropped at the end."""
    run = PostgresRun()
    await run.create()
    yield run
    await run.drop()


@pytest.fixture(params=["sqlite", "postgres"])
async def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        path = tmp_path / "faults.db"
        await asyncio.to_thread(upgrade, f"sqlite+aiosqlite:///{path}")
        yield f"sqlite+aiosqlite:///{path}"
        return
    run = PostgresRun()
    url = await run.create()
    try:
        yield url
    finally:
        await run.drop()


def server(url: str, tmp_path: Path, name: str, **env: str) -> Server:
    return Server(url, free_port(), tmp_path / f"{name}.log", {"SWEEPER": "false"} | env)


async def test_sigkill_mid_run__restart_every_operation_committed_once(backend_url, tmp_path):
    """16 workers; the server is SIGKILLed mid-run and restarted on the same database: every
    operation ends committed once, the dead run's leases lapse and other workers take
    over, nothing claimed is lost."""
    count = 300
    first = server(backend_url, tmp_path, "first").start()
    await asyncio.to_thread(first.wait_ready)
    ledger = Ledger()
    ids = await seed([first.url], count, "kill", ledger)
    plan = WorkerPlan(lease_ms=1500, death_rate=0.02, deadline=time.monotonic() + 120)
    stop, tasks = await run_workers([first.url], ledger, plan)
    try:
        while sum(ledger.finalized.values()) < count // 3:
            await asyncio.sleep(0.05)
        first.kill()
        committed_at_kill = sum(ledger.finalized.values())
        await asyncio.sleep(0.5)
        second = Server(first.database_url, first.port, first.log, first.env).start()
        await asyncio.to_thread(second.wait_ready)
        states = await wait_all_committed([second.url], ids, timeout_s=90)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    counts, mismatched = check_exactly_once(ids, states, ledger)
    # A mark the dead server applied but never answered is counted yet unseen: at most one
    # per request in flight when it died (16 workers).
    assert all(seen <= attempts <= seen + 1 for _, attempts, seen in mismatched), mismatched
    assert len(mismatched) <= 16
    assert ledger.transport_errors > 0  # the kill was felt
    assert second.terminate() in (0, -15)
    report(
        f"sigkill [{'postgres' if 'postgres' in backend_url else 'sqlite'}]",
        {"finalized_before_kill": committed_at_kill, **counts},
    )


async def terminate_backends(database: str) -> int:
    """``pg_terminate_backend`` every connection to ``database`` (ours excepted)."""
    admin = await asyncpg.connect(postgres_admin_url())
    try:
        rows = await admin.fetch(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
    finally:
        await admin.close()
    return len(rows)


async def test_postgres_backends_terminated__fail_fast_with_a_code_then_recover(
    fresh_postgres, tmp_path
):
    """Every backend of the server's database terminated again and again for 3 s while
    workers run: requests fail fast with SERVICE_UNAVAILABLE (or /readyz says 503), no
    request hangs or is masked, and the server recovers without a restart."""
    assert fresh_postgres.url is not None
    first = server(fresh_postgres.url, tmp_path, "pg", DB_POOL_SIZE="8").start()
    await asyncio.to_thread(first.wait_ready)
    ledger = Ledger()
    ids = await seed([first.url], 200, "term", ledger)
    plan = WorkerPlan(lease_ms=1500, deadline=time.monotonic() + 120)
    stop, tasks = await run_workers([first.url], ledger, plan)
    terminated = unready = probes = 0
    slowest = 0.0
    try:
        await asyncio.sleep(0.5)
        end = time.monotonic() + 3.0
        async with service_client() as http:
            while time.monotonic() < end:
                terminated += await terminate_backends(fresh_postgres.name)
                started = time.monotonic()
                response = await http.get(first.url + "/readyz", timeout=10)
                slowest = max(slowest, time.monotonic() - started)
                probes += 1
                unready += response.status_code == 503
                await asyncio.sleep(0.05)
            recovered_in = time.monotonic()
            while (await http.get(first.url + "/readyz", timeout=10)).status_code != 200:
                await asyncio.sleep(0.1)
            recovered_in = time.monotonic() - recovered_in
            probe = await call(http, first.url, "ServerTime", Ledger())
        states = await wait_all_committed([first.url], ids, timeout_s=90)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    counts, mismatched = check_exactly_once(ids, states, ledger)
    # A write the database applied whose answer was lost with its connection is counted
    # but unseen by the worker: attempts never fall below the marks seen.
    assert all(attempts >= seen for _, attempts, seen in mismatched), mismatched
    failures_with_code = ledger.error_codes["SERVICE_UNAVAILABLE"]
    assert unready + failures_with_code > 0, "no failure was seen while backends died"
    assert ledger.error_codes["INTERNAL_SERVER_ERROR"] == 0, first.output()[-6000:]
    assert slowest < 6.0
    assert probe is not None
    assert first.process is not None and first.process.poll() is None  # never restarted
    assert first.terminate() in (0, -15)
    report(
        "postgres backends terminated",
        {
            "backends_terminated": terminated,
            "readyz_probes": probes,
            "readyz_503": unready,
            "slowest_probe_s": round(slowest, 2),
            "recovered_in_s": round(recovered_in, 2),
            **counts,
        },
    )


def start_pgbouncer(tmp_path: Path, database: str) -> tuple[subprocess.Popen[bytes], int]:
    """A pgbouncer in transaction mode on a free port, in front of 127.0.0.1:5432."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        pytest.fail("pgbouncer is not installed (apt-get install -y pgbouncer)")
    port = free_port()
    command = [binary]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root: as the postgres user then
        tmp_path = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        tmp_path.chmod(0o777)
        command += ["-u", "postgres"]
    (tmp_path / "users.txt").write_text('"postgres" ""\n')
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(
        f"[databases]\n{database} = host=127.0.0.1 port=5432 dbname={database}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
        "auth_type = trust\n"
        f"auth_file = {tmp_path / 'users.txt'}\n"
        "pool_mode = transaction\n"
        "default_pool_size = 10\nmax_client_conn = 200\n"
        f"unix_socket_dir =\nlogfile = {tmp_path / 'pgbouncer.log'}\n"
        f"pidfile = {tmp_path / 'pgbouncer.pid'}\n"
        "ignore_startup_parameters = extra_float_digits\n"
    )
    process = subprocess.Popen(
        [*command, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 10

    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process, port
        time.sleep(0.1)
    process.kill()
    raise AssertionError("pgbouncer did not start: " + (tmp_path / "pgbouncer.log").read_text())


@pytest.mark.parametrize("through", ["direct", "pgbouncer"])
async def test_replicas_on_one_postgres__random_worker_deaths_exactly_once(
    fresh_postgres, tmp_path, through
):
    """Two server processes on one PostgreSQL (directly, or through pgbouncer in transaction
    mode with asyncpg's statement cache off), 16 workers, random worker deaths: every
    operation committed exactly once and its attempts equal its marked runs."""
    assert fresh_postgres.url is not None
    url = fresh_postgres.url
    bouncer = None
    env = {"DB_POOL_SIZE": "8"}
    if through == "pgbouncer":
        bouncer, port = start_pgbouncer(tmp_path, fresh_postgres.name)
        url = url.replace("127.0.0.1:5432", f"127.0.0.1:{port}")
        env["DB_STATEMENT_CACHE_SIZE"] = "0"
        env["DB_LOCK_TIMEOUT_SECONDS"] = env["DB_STATEMENT_TIMEOUT_SECONDS"] = "0"
    servers = []
    try:
        for i in range(2):
            # Migrations ran directly on PostgreSQL (fresh_postgres); replicas skip them.
            replica = server(url, tmp_path, f"replica{i}", **env)
            replica.migrate = False
            replica.env["SWEEPER"] = "true" if through == "direct" else "false"
            servers.append(replica.start())
        for replica in servers:
            await asyncio.to_thread(replica.wait_ready)
        urls = [replica.url for replica in servers]
        ledger = Ledger()
        started = time.monotonic()
        ids = await seed(urls, OPERATIONS_MANY, f"many-{through}", ledger)
        plan = WorkerPlan(lease_ms=1000, death_rate=0.03, deadline=time.monotonic() + 240)
        stop, tasks = await run_workers(urls, ledger, plan)
        try:
            states = await wait_all_committed(urls, ids, timeout_s=240)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
        counts, mismatched = check_exactly_once(ids, states, ledger)
        assert not mismatched, mismatched[:5]
        assert sum(ledger.finalized.values()) == len(ids)
        outputs = "".join(replica.output() for replica in servers)
        assert "prepared statement" not in outputs, outputs[-3000:]
        assert "INTERNAL_SERVER_ERROR" not in ledger.error_codes, ledger.error_codes
        for replica in servers:
            assert replica.terminate() in (0, -15)
        report(
            f"replicas x2 [{through}]",
            {"seconds": round(elapsed, 1), **counts},
        )
    finally:
        for replica in servers:
            replica.kill()
        if bouncer is not None:
            bouncer.terminate()
            bouncer.wait(10)


async def test_sigterm__finishes_in_flight_requests_stops_the_sweeper_closes_the_pool(
    backend_url, tmp_path
):
    """Requests in flight when SIGTERM arrives all get their answers; the log says the
    sweeper stopped and the pool closed; the process exits cleanly."""
    running = server(
        backend_url, tmp_path, "graceful", SWEEPER="true", LOG_LEVEL="info", LOG_FORMAT="json"
    ).start()
    await asyncio.to_thread(running.wait_ready)
    ledger = Ledger()
    ids = await seed([running.url], 50, "graceful", ledger)
    assert running.process is not None

    signalled_at = 0.0

    async with service_client(timeout=20) as http:

        async def one(operation_id: str, n: int) -> tuple[int, float]:
            response = await http.post(
                running.url + "/graphql",
                json={
                    "query": "query Q($c: String!, $o: String!)"
                    " { operation(callerDID: $c, operationID: $o) { state } }",
                    "variables": {"c": "did:key:fault-caller", "o": operation_id},
                },
                headers={"X-Request-ID": f"graceful-{operation_id}-{n}"},
            )
            return response.status_code, time.monotonic()

        results: list[tuple[int, float] | BaseException] = []

        async def client(index: int) -> None:
            n = 0
            while True:  # bounded: the server stops within seconds of the signal
                n += 1
                try:
                    results.append(await one(ids[(index * 7 + n) % len(ids)], index * 10_000 + n))
                except httpx.TransportError as error:
                    results.append(error)
                    return

        clients = [asyncio.create_task(client(i)) for i in range(16)]
        await asyncio.sleep(1.0)
        signalled_at = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.gather(*clients), 30)
    code = await asyncio.to_thread(running.process.wait, 20)
    answered = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if not isinstance(r, tuple)]
    output = running.output()
    assert code in (0, -15), output
    assert "sweeper: stopped" in output
    assert "database: pool closed" in output
    assert "closed by force" not in output
    assert all(status == 200 for status, _ in answered), answered
    # Requests the server had begun were answered, some after the signal; one it never
    # read (still in the socket's backlog or an idle keep-alive) is closed unanswered, never
    # cut off half-way.
    after_signal = sum(1 for _, at in answered if at > signalled_at)
    started = [
        line
        for line in output.splitlines()
        if '"logger": "connector_store.request"' in line and "graceful-" in line
    ]
    assert len(started) == len(answered), (len(started), len(answered))
    assert all(isinstance(error, (httpx.ConnectError, httpx.ReadError)) for error in refused)
    report(
        f"sigterm [{'postgres' if 'postgres' in backend_url else 'sqlite'}]",
        {
            "requests": len(results),
            "answered": len(answered),
            "answered_after_sigterm": after_signal,
            "closed_unread": len(refused),
        },
    )
