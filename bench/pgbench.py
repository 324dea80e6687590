"""The database ceiling: pgbench replaying the exact SQL the service runs for one payment.

The statements are recorded, not rewritten: the three events of a fresh
Checkout payment (session, payment intent, charge) go through
the service's delivery once while every statement psycopg sends is captured with
its parameters rendered as literals, BEGIN and COMMIT included where the
service sends them (an event no handler acts on is one statement, no
transaction). Each event's statements go into a pgbench script, with its
event ids and payment id turned into pgbench expressions so every run of
the script is a new payment. Whatever the
handlers do (ledger, payments, fulfilments, outbox), the ceiling does too.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from webhooks import bootstrap
from webhooks.core import ledger
from webhooks.infra.config import Settings
from webhooks.providers.stripe import NAME, parse
from webhooks.traffic import samples

from . import cpu

PGBENCH = "pgbench"
EVENTS_PER_SCRIPT = 3
# Stands for the ledger row id while a statement is rendered, then becomes :ledger_id.
_LEDGER_ID_SENTINEL = 918273645546372819


@dataclass(frozen=True)
class Outcome:
    deliveries_per_s: float
    # Per run of the script: one payment's three transactions.
    latencies_ms: list[float]
    # CPU of pgbench's PostgreSQL backends per delivery (one of the script's transactions).
    postgres_cpu_us: float
    # Share of the machine's CPU left idle over the same window.
    idle: float


@contextlib.contextmanager
def captured():
    """Every (cursor, query, params) psycopg executes inside the block."""
    calls = []
    execute = psycopg.Cursor.execute

    def capture(cursor, query, params=None, **kwargs):
        calls.append((cursor, query, params))
        return execute(cursor, query, params, **kwargs)

    psycopg.Cursor.execute = capture
    try:
        yield calls
    finally:
        psycopg.Cursor.execute = execute


def _literal(conn: psycopg.Connection, cursor, query, params) -> str:
    if isinstance(query, sql.Composable):
        query = query.as_string(conn)
    if isinstance(query, bytes):
        query = query.decode()
    if isinstance(cursor, psycopg.RawCursor):  # $1-style placeholders
        return re.sub(r"\$(\d+)", lambda m: sql.Literal(params[int(m[1]) - 1]).as_string(conn), query)
    return psycopg.ClientCursor(conn).mogrify(query, params)


def record(conninfo: str) -> list[list[str]]:
    """The statements of each event of one new payment, as pgbench script lines."""
    events = samples.payment_events()
    recorded = []
    service = bootstrap.build(Settings.from_env({"DATABASE_URL": conninfo}), min_size=1, max_size=1)
    try:
        service.pool.get().wait()
        for evt in events:
            with captured() as calls:
                answer = service.accept(NAME, parse(samples.encode(evt).decode()))
            assert answer.status == 200, answer
            with service.pool.get().connection() as conn:
                recorded.append([_statement(conn, *call) for call in calls if str(call[1]).strip()])
    finally:
        service.close()
    return [[_parameterise(statement, events) for statement in event] for event in recorded]


def _statement(conn: psycopg.Connection, cursor, query, params) -> str:
    """One captured call as a pgbench command, the ledger row id passed by variable."""
    if query == ledger._COMPLETE:
        params = {**params, "ledger_id": _LEDGER_ID_SENTINEL}
    text = _literal(conn, cursor, query, params).strip().rstrip(";")
    text = text.replace(str(_LEDGER_ID_SENTINEL), ":ledger_id")
    # pgbench's \gset ends the command, as a semicolon would.
    return f"{text} \\gset" if query == ledger._CLAIM else f"{text};"


# A comment (its apostrophes are not quotes), an E'' string (backslashes
# escape) or a standard string; scanned left to right, so each is whole.
_TOKEN = re.compile(r"(--[^\n]*)" r"|(?<!\w)(E)'((?:[^'\\]|\\.|'')*)'" r"|()'((?:[^']|'')*)'")


def _parameterise(statement: str, events: list[dict]) -> str:
    """Swap the recorded payment's ids for ones new on every run of the script.

    The ids only ever occur inside string literals; each such literal becomes
    a parenthesised concatenation, so a cast after it (`'{...}'::text[]`)
    still applies to the whole string.
    """
    ids = {samples.payment_id(events[0]): "'pi_pgb_' || :client_id || '_' || :n"}
    for i, evt in enumerate(events):
        ids[evt["id"]] = f"'evt_pgb_' || :client_id || '_' || :n || '_{i}'"
    pattern = re.compile("|".join(map(re.escape, ids)))

    def splice(match: re.Match) -> str:
        prefix = match[2] if match[2] is not None else match[4]
        body = match[3] if match[3] is not None else match[5]
        if match[1] is not None or not pattern.search(body):
            return match[0]
        pieces = pattern.split(body)
        found = pattern.findall(body)
        parts = [f"{prefix}'{pieces[0]}'"]
        for recorded, piece in zip(found, pieces[1:], strict=True):
            parts += [f"({ids[recorded]})", f"{prefix}'{piece}'"]
        return "(" + " || ".join(parts) + ")"

    return _TOKEN.sub(splice, statement)


# pgqueuer's trigger as migrations/0010_outbox_pgqueuer.sql created it and 0040 dropped it.
_NOTIFY_TRIGGER = """
CREATE TRIGGER tg_pgqueuer_changed
AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON pgqueuer
EXECUTE FUNCTION fn_pgqueuer_changed()
"""


@contextlib.contextmanager
def notify_trigger(conninfo: str):
    """pgqueuer's NOTIFY trigger back on the outbox for the block: every enqueue's commit notifies."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(_NOTIFY_TRIGGER)
    try:
        yield
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("DROP TRIGGER tg_pgqueuer_changed ON pgqueuer")


def script(recorded: list[list[str]]) -> str:
    lines = ["\\set n random(1, 1000000000000000)"]
    for statements in recorded:
        lines += statements
    return "\n".join(lines) + "\n"


def run(conninfo: str, clients: int, seconds: int, deliveries_per_s: float | None = None) -> Outcome:
    """pgbench flat out, or paced at `deliveries_per_s` (a busy server commits
    many transactions per WAL flush; one paced at a service's rate, fewer)."""
    name = f"bench-pgbench-{clients}"
    paced = ["-R", f"{deliveries_per_s / EVENTS_PER_SCRIPT:.1f}"] if deliveries_per_s else []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "payment.sql"
        path.write_text(script(record(conninfo)))
        args = [
            PGBENCH,
            "-n",
            "-M",
            "prepared",
            "-c",
            str(clients),
            "-j",
            "2",
            "-T",
            str(seconds),
            *paced,
            "-f",
            str(path),
            "--log",
            "--log-prefix",
            str(Path(tmp) / "txn"),
            make_conninfo(conninfo, application_name=name),
        ]
        started = time.time()
        with subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp
        ) as proc:
            window = _backend_cpu(conninfo, name, clients, started + seconds)
            stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"pgbench failed:\n{stdout}\n{stderr}")
        tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", stdout)[1])
        # One line per run of the script: client, run, latency µs, script, end epoch s, end µs
        logged = [line.split() for log in Path(tmp).glob("txn*") for line in log.read_text().splitlines()]
    latencies = sorted(int(fields[2]) / 1000 for fields in logged)
    first, last, cpu_s, idle = window
    done = sum(1 for fields in logged if first < int(fields[4]) + int(fields[5]) / 1e6 <= last)
    return Outcome(tps * EVENTS_PER_SCRIPT, latencies, cpu_s / max(done * EVENTS_PER_SCRIPT, 1) * 1e6, idle)


def _backend_cpu(conninfo: str, name: str, clients: int, ends: float) -> tuple[float, float, float, float]:
    """(from, to, CPU seconds, machine idle share) of pgbench's backends over most of its run.

    Read while they live: a backend's /proc entry goes when pgbench
    disconnects, so the window stops half a second before the run does and
    the transactions counted are the ones that ended inside it.
    """
    pids: list[int] = []
    while len(pids) < clients and time.time() < ends - 1:
        time.sleep(0.05)
        pids = cpu.backends(conninfo, name)
    first, before, machine = time.time(), cpu.seconds(pids), cpu.machine_jiffies()
    time.sleep(max(ends - 0.5 - first, 0))
    return first, time.time(), cpu.seconds(pids) - before, cpu.idle_share(machine, cpu.machine_jiffies())
