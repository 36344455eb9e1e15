"""CPU time of processes over a window, from ``/proc``: how every row of ``make bench`` counts
the CPU of its server, of the PostgreSQL backends serving it, and of its client.

A ``Window`` counts groups of processes, each group given by its roots and counting them
and their descendants (``server``: a server and its workers; ``client``: the load generator,
or a peer's own process), and, given ``Backends``, the group ``postgres``: the PostgreSQL
backends whose client is a process of another group, those whose ``client_port`` in
``pg_stat_activity`` is the local port of a TCP socket such a process holds open. A
process's CPU is the run time of its threads, user and system together, from
``/proc/<pid>/task/<tid>/schedstat`` in ns: what ``utime + stime`` of ``/proc/<pid>/stat``
count, there in ticks of 10 ms, too coarse for sixteen backends over a row of a second or
two. The members of each group are found when the window opens and again when it closes: one
that began inside the window counts from 0, and a thread or process that ended inside it is
not counted (the rows' pools and workers are up before a window opens and stay up until it
closes).

A measured child (``started``, ``measured``) marks its window itself, so that its start-up
and warm-up stay outside: it prints one line when it is ready (``ready``), waits for one line on its
stdin, runs, prints its result as one JSON line, then holds its connections until its stdin
closes (so that its backends are still there to be read). ``ready`` and ``done`` are that
protocol's Python side; ``benchmarks/peers/pgboss.mjs`` keeps it in JavaScript.
"""

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import asyncpg

NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")


def descendants(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process descended from one of them (alive now)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:
            continue
        # The fields after the command name, which is in parentheses and may hold any byte.
        parents[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    tree = set(roots)
    frontier = list(tree)
    while frontier:
        parent = frontier.pop()
        children = [child for child, of in parents.items() if of == parent and child not in tree]
        tree.update(children)
        frontier += children
    return tree


def run_ns(pids: Iterable[int]) -> dict[int, int]:
    """Each process's CPU so far in ns (the run time of all its threads); a process that has
    ended is left out."""
    spent = {}
    for pid in pids:
        total = 0
        try:
            for task in os.scandir(f"/proc/{pid}/task"):
                total += int(Path(task.path, "schedstat").read_bytes().split()[0])
        except OSError:
            continue
        spent[pid] = total
    return spent


def command_name(pid: int) -> str | None:
    """The command name of process ``pid`` (``/proc/<pid>/comm``), or None if there is none."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def port_of(address: str) -> int:
    """The port of an address of ``/proc/net/tcp`` (``0100007F:1538``: hex)."""
    return int(address.rpartition(":")[2], 16)


def tcp_ports(pids: Iterable[int], remote_port: int) -> set[int]:
    """The local ports of the TCP sockets (IPv4 and IPv6) the processes hold open to
    ``remote_port`` (a local port alone may be shared by sockets to other ports)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports = set()
    for table in NET_TCP:
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and port_of(remote) == remote_port:
                    ports.add(port_of(local))
    return ports


class Backends:
    """The PostgreSQL backends serving given processes, read from ``pg_stat_activity`` over
    a connection of its own (whose backend no window counts, as no counted process holds
    it)."""

    def __init__(self, connection: asyncpg.Connection, port: int) -> None:
        self.connection = connection
        self.port = port

    @classmethod
    async def connect(cls, url: str) -> "Backends | None":
        """Over a new connection to ``url`` (a libpq URL), or None when PostgreSQL's
        backends are not processes here (another machine or container, or a Unix socket,
        which has no client port): the backend of that connection, found by its port, must
        be a ``postgres`` process in ``/proc``."""
        connection = await asyncpg.connect(url, timeout=5)
        backends = cls(connection, await connection.fetchval("SELECT inet_server_port()") or 0)
        pid = connection.get_server_pid()
        if pid not in await backends.serving([os.getpid()]) or command_name(pid) != "postgres":
            await backends.close()
            return None
        return backends

    async def serving(self, pids: Iterable[int]) -> set[int]:
        """The pids of the backends connected from the TCP sockets of ``pids``."""
        ports = sorted(tcp_ports(pids, self.port))
        rows = await self.connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[])", ports
        )
        return {row["pid"] for row in rows}

    async def close(self) -> None:
        await self.connection.close()


class Window:
    """The CPU of ``groups`` (a name to the pids of its roots) and, given ``backends``, of the
    PostgreSQL backends serving them (the group ``postgres``), between ``open`` and
    ``close``."""

    def __init__(self, groups: Mapping[str, Sequence[int]], backends: Backends | None) -> None:
        self.groups = groups
        self.backends = backends
        self.members: dict[str, set[int]] = {}
        self.before: dict[str, dict[int, int]] = {}

    async def _members(self) -> dict[str, set[int]]:
        members = {name: descendants(roots) for name, roots in self.groups.items()}
        if self.backends is not None:
            members["postgres"] = await self.backends.serving(set().union(*members.values()))
        return members

    async def open(self) -> None:
        self.members = await self._members()
        self.before = {name: run_ns(pids) for name, pids in self.members.items()}

    async def close(self) -> dict[str, dict[str, float]]:
        """Each group's ``cpu_ms`` over the window and ``processes``, how many it counted."""
        now = await self._members()
        spent = {}
        for name, pids in self.members.items():
            after = run_ns(pids | now[name])
            ns = sum(value - self.before[name].get(pid, 0) for pid, value in after.items())
            spent[name] = {"cpu_ms": ns / 1e6, "processes": len(after)}
        return spent


class Child:
    """A measured child (``started``) between its ``ready`` and its result."""

    def __init__(self, process: asyncio.subprocess.Process, command: Sequence[str]) -> None:
        self.process = process
        self.command = command

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    async def go(self) -> dict[str, Any]:
        """Opens the child's window (the ``go`` line) and returns its JSON result once it
        prints it; raises ``SystemExit`` when the child ends without one."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(b"go\n")
        await self.process.stdin.drain()
        line = await self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.command[:3]} failed in its window")
        result: dict[str, Any] = json.loads(line)
        return result


@contextlib.asynccontextmanager
async def started(command: Sequence[str]) -> AsyncIterator[Child]:
    """Runs ``command`` (from the repository root), a child keeping the protocol of this
    module's docstring, and yields it once it is ready; on leaving, closes its stdin and waits
    for it to end. Raises ``SystemExit`` when the child fails before its window, or ends with
    a code other than 0."""
    root = Path(__file__).resolve().parent.parent
    process = await asyncio.create_subprocess_exec(
        *command, cwd=root, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        if await process.stdout.readline() != b"ready\n":
            raise SystemExit(f"{command[:3]} failed before its window")
        yield Child(process, command)
    finally:
        process.stdin.close()
        code = await process.wait()
    if code != 0:
        raise SystemExit(f"{command[:3]} failed with {code}")


async def measured(
    command: Sequence[str], servers: Sequence[int], backends: Backends | None
) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """Runs ``command`` (``started``) and counts the CPU of its window: ``server``, the
    processes of ``servers`` (and their descendants); ``client``, the child's; ``postgres``,
    their backends'. Returns the child's JSON result and ``Window.close``'s counts; raises
    ``SystemExit`` when the child fails."""
    async with started(command) as child:
        window = Window({"server": servers, "client": [child.pid]}, backends)
        await window.open()
        result = await child.go()
        spent = await window.close()
    return result, spent


def ready() -> None:
    """A measured child's start of its window: says it is ready and waits to be told to go."""
    print("ready", flush=True)
    sys.stdin.readline()


def done(result: Mapping[str, Any]) -> None:
    """A measured child's end of its window: prints ``result`` and waits until its stdin
    closes, holding its connections until the window has been read."""
    print(json.dumps(result), flush=True)
    sys.stdin.read()
