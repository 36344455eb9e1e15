"""``serve --workers N``: N processes serving one port, supervised by the ``serve`` process.

Each worker (``connector-store serve-worker``) binds the port with ``SO_REUSEPORT``
(``reuse_port_socket``) and serves the app as a single process does (``server.http_server``).
``supervise`` makes ``PROMETHEUS_MULTIPROC_DIR`` anew and removes it when it exits; gives
``SWEEPER=false`` to every SQLite worker but the first; starts a worker that exited again, at
once after one that served ``QUICK_EXIT_S`` or more, otherwise after ``restart_delay``; raises
``WorkersFailing`` (one ``error:`` line, exit status 1) after ``MAX_QUICK_EXITS`` quick exits
in a row of one worker, once it stopped the others; on SIGTERM or SIGINT sends SIGTERM to every
worker and kills, with a WARNING, one still running ``STOP_MARGIN_S`` past
``SHUTDOWN_GRACE_SECONDS``. Workers die with their supervisor (``die_with_supervisor``).
``serve`` refuses ``METRICS_PORT`` with workers. Why:
docs/decisions/0016-workers-share-a-port-under-a-supervisor.md.
"""

import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import FrameType

from prometheus_client.multiprocess import mark_process_dead

from server.metrics import MULTIPROC_ENV
from server.settings import Settings

log = logging.getLogger("connector_store.workers")

POLL_S = 0.2
QUICK_EXIT_S = 10.0
"""A worker that exits within this many seconds of its start exited right after it."""
RESTART_DELAYS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Seconds before starting a worker again after its 1st, 2nd, … quick exit in a row (the last
one for any further)."""
MAX_QUICK_EXITS = 4
"""Quick exits in a row of one worker after which the supervisor gives up."""
STOP_MARGIN_S = 5.0
"""Beyond a worker's own ``SHUTDOWN_GRACE_SECONDS``, how long the supervisor waits for it to
exit after SIGTERM before it kills it."""


class WorkersFailing(Exception):
    """The workers keep exiting right after they start; the message says how."""


def restart_delay(quick_exits: int) -> float:
    """Seconds before starting again a worker that has exited ``quick_exits`` times in a row
    right after its start (0: it had served for a while)."""
    if quick_exits == 0:
        return 0.0
    return RESTART_DELAYS[min(quick_exits, len(RESTART_DELAYS)) - 1]


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that other workers bind too (``SO_REUSEPORT``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


PR_SET_PDEATHSIG = 1
"""Linux's ``prctl`` option: the signal a process gets when its parent dies."""


def die_with_supervisor() -> None:
    """Run in each worker before it starts: SIGTERM when the supervisor dies, even by
    SIGKILL (Linux's ``PR_SET_PDEATHSIG``), so no worker is left holding the port; elsewhere
    nothing."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stopped_within(processes: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Wait for ``processes`` (already sent SIGTERM) to exit, ``timeout_s`` seconds in all;
    kill each still running past it, with a WARNING naming it: a worker stuck in its
    shutdown never keeps ``serve`` from exiting."""
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning(
                "worker (pid %d) did not exit within %g s of SIGTERM: killing it",
                process.pid,
                timeout_s,
            )
            process.kill()
            process.wait()


def worker_env(settings: Settings, index: int, metrics_dir: str) -> dict[str, str]:
    """The environment of worker ``index``: the supervisor's, with the metrics folder and,
    on SQLite, the sweeper in the first worker only."""
    env = dict(os.environ, **{MULTIPROC_ENV: metrics_dir})
    if index > 0 and not settings.database_url.startswith("postgresql"):
        env["SWEEPER"] = "false"
    return env


def supervise(settings: Settings, host: str, port: int, workers: int) -> int:
    """Run ``workers`` worker processes on ``host:port`` until SIGTERM or SIGINT; the exit
    status is 0 after a clean stop. Raises ``WorkersFailing`` (the other workers stopped)
    when one worker has exited ``MAX_QUICK_EXITS`` times in a row right after starting."""
    metrics_dir = tempfile.mkdtemp(prefix="connector-store-metrics-")
    stop_timeout_s = settings.shutdown_grace_seconds + STOP_MARGIN_S
    command = [sys.executable, "-m", "server", "serve-worker", "--host", host, "--port", str(port)]
    stopping = False

    def start(index: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            command,
            env=worker_env(settings, index, metrics_dir),
            preexec_fn=die_with_supervisor,
        )

    def stop(signum: int, _: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for process in running:
            if process.poll() is None:
                # SIGTERM whatever came: a worker that also got the terminal's SIGINT would
                # take a second SIGINT as "exit now", without its grace.
                process.send_signal(signal.SIGTERM)

    running = [start(index) for index in range(workers)]
    started = [time.monotonic()] * workers
    quick_exits = [0] * workers
    restart_at: list[float | None] = [None] * workers
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    log.info("serving with %d workers (pids %s)", workers, [p.pid for p in running])
    try:
        while not stopping:
            now = time.monotonic()
            for index, process in enumerate(running):
                if stopping:
                    break
                due = restart_at[index]
                if due is not None:
                    if now >= due:
                        running[index], started[index] = start(index), now
                        restart_at[index] = None
                    continue
                if process.poll() is None:
                    continue
                mark_process_dead(process.pid, metrics_dir)
                quick = now - started[index] < QUICK_EXIT_S
                quick_exits[index] = quick_exits[index] + 1 if quick else 0
                if quick_exits[index] >= MAX_QUICK_EXITS:
                    stop(signal.SIGTERM, None)
                    stopped_within(running, stop_timeout_s)
                    raise WorkersFailing(
                        f"worker {index} exited {quick_exits[index]} times in a row within "
                        f"{QUICK_EXIT_S:g} s of starting (last status {process.returncode}); "
                        "giving up: see its log above"
                    )
                delay = restart_delay(quick_exits[index])
                log.warning(
                    "worker %d (pid %d) exited with %s: starting it again in %g s",
                    index,
                    process.pid,
                    process.returncode,
                    delay,
                )
                restart_at[index] = now + delay
            time.sleep(POLL_S)
        stopped_within(running, stop_timeout_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0
