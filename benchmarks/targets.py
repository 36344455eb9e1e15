"""The CPU report of ``benchmarks.side_by_side`` and issue 47's targets beside each figure:
our HTTP rows beside pg-boss's in the same run, per lifecycle (pg-boss: per job)."""

BATCH = 50
CPU_PEERS = [
    ("at batch 1", "server_http_1", "pgboss_1", {"postgres": 1.5, "server": 1.5}),
    (
        f"at batch {BATCH}, claiming",
        "server_http_50",
        "pgboss_50",
        {"postgres": 0.2, "server": 0.2},
    ),
    (
        f"at batch {BATCH}, leasing",
        "server_lease_50",
        "pgboss_50",
        {"postgres": 0.2, "server": 0.2},
    ),
]
"""Our HTTP rows beside pg-boss's, and the targets of their CPU per lifecycle in ms
(issue 47's, for the server as ``make run`` starts it)."""
CPU_MEASURES = [
    ("postgres", "PostgreSQL's backends"),
    ("server", "the server"),
    ("outside", "outside PostgreSQL (ours: server + load generator; pg-boss: its process)"),
    ("all", "all (server, PostgreSQL, client)"),
]


def cell(measure: dict[str, float], field: str, form: str) -> str:
    return format(measure[field], form) if field in measure else ""


def cpu_report(medians: dict[str, dict[str, float]]) -> list[str]:
    """The report's lines on CPU: ours beside pg-boss and the targets (``CPU_PEERS``), per
    lifecycle (pg-boss: per job), and each HTTP row's load generator over its server."""
    lines = [
        "",
        "CPU ms per lifecycle (pg-boss: per job), ours beside pg-boss in the same run, and the"
        " targets (issue 47):",
        "",
        "| CPU of | ours | pg-boss | ours ÷ pg-boss | target | held |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for measure, whose in CPU_MEASURES:
        for label, key, peer, targets in CPU_PEERS:
            field = f"{measure}_cpu_ms"
            if key not in medians or field not in medians[key]:
                continue
            ours = medians[key][field]
            theirs = medians.get(peer, {}).get(field)
            target = targets.get(measure)
            lines.append(
                f"| {whose}, {label} | {ours:.3f}"
                + (f" | {theirs:.3f} | {ours / theirs:.2f}" if theirs else " | | ")
                + (f" | ≤ {target} | {'yes' if ours <= target else 'no'} |" if target else " | | |")
            )
    shares = [
        f"{key} {measure['client_cpu_ms'] / measure['server_cpu_ms']:.2f}"
        for key, measure in medians.items()
        if measure.get("server_cpu_ms")
    ]
    if shares:
        lines += ["", "The load generator's CPU ÷ the server's, per HTTP row: " + ", ".join(shares)]
    return lines


TARGETS = [
    ("batch 1, 1,000 accounts", "server_http_1", "pgboss_1", 0.5, 1.5, "floor_http_1"),
    ("batch 1, one account", "server_http_1_one_account", "pgboss_1", 0.5, 1.5, "floor_http_1"),
    (f"batch {BATCH}, 1,000 accounts (claiming)", "server_http_50", "pgboss_50", 0.35, 0.2, None),
    (
        f"batch {BATCH}, one account (claiming)",
        "server_http_50_one_account",
        "pgboss_50",
        0.35,
        0.2,
        None,
    ),
    (f"batch {BATCH}, 1,000 accounts (leasing)", "server_lease_50", "pgboss_50", 0.35, 0.2, None),
]
"""Issue 47's targets, per row: (work, our row, pg-boss's row, ours ÷ pg-boss at least, server
and PostgreSQL CPU ms per lifecycle at most, the floor service's row whose server CPU ours
must stay within 1.5 times of, when the run has one)."""
FLOOR_FACTOR = 1.5
SERVER_TIME_FACTOR = 3.0


def held(value: float, bound: float, at_least: bool) -> str:
    """``value`` beside its bound, with whether it holds."""
    ok = value >= bound if at_least else value <= bound
    return f"{value:.2f} ({'≥' if at_least else '≤'} {bound:g}: {'yes' if ok else 'no'})"


def targets_report(medians: dict[str, dict[str, float]]) -> list[str]:
    """Issue 47's targets table: each row's figure beside its target, and whether it holds."""
    lines = [
        "",
        "Issue 47's targets (the server as `make run` starts it), each figure beside its target:",
        "",
        "| work | ours ÷ pg-boss | server CPU ms / lifecycle | PostgreSQL CPU ms / lifecycle"
        " (pg-boss) | server CPU ÷ the bare service's |",
        "| --- | --- | --- | --- | --- |",
    ]
    for work, key, peer, ratio, cpu, floor in TARGETS:
        if key not in medians or peer not in medians:
            continue
        ours, theirs = medians[key], medians[peer]
        server, postgres = ours.get("server_cpu_ms"), ours.get("postgres_cpu_ms")
        floor_server = medians.get(floor or "", {}).get("server_cpu_ms")
        lines.append(
            f"| {work} | {held(ours['per_s'] / theirs['per_s'], ratio, True)}"
            f" | {held(server, cpu, False) if server is not None else ''}"
            f" | {held(postgres, cpu, False) if postgres is not None else ''}"
            + (
                f" ({theirs['postgres_cpu_ms']:.2f})"
                if postgres is not None and "postgres_cpu_ms" in theirs
                else ""
            )
            + (
                f" | {held(server / floor_server, FLOOR_FACTOR, False)} |"
                if server is not None and floor_server
                else " | |"
            )
        )
    if "server_time_16" in medians and "stock_time_16" in medians:
        factor = medians["server_time_16"]["per_s"] / medians["stock_time_16"]["per_s"]
        lines.append(
            f"| `{{ serverTime }}` ÷ stock Strawberry (requests/s) |"
            f" {held(factor, SERVER_TIME_FACTOR, True)} | | | |"
        )
    return lines
