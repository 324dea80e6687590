"""`python -m bench`: the service against its ceilings, in one run, as a markdown table of ratios.

Every HTTP row is served by the project's gunicorn.conf.py (same workers,
same worker class) and driven by the loadtest client (or wrk) at the same
concurrency; gunicorn alone, except one row where nginx is in front of it,
as `python -m webhooks serve` runs it; the database ceiling is pgbench at that many clients. Rows:
the service with each event delivered once and K times, a trivial Flask
endpoint (HTTP ceiling), pgbench replaying the SQL the service sends
(database ceiling), and paced at the service's rate,
the naive check-then-insert handler in a duplicate storm, and the service
on a ledger pre-filled with --ledger-rows rows (ten million by default).
The outbox rows time default `python -m webhooks worker` processes draining
a backlog into a receiver that answers at once or after 100 ms, and the
wake-up from a commit to the receiver; pgbench_notify is the database ceiling with pgqueuer's NOTIFY
trigger put back, so what a notifying commit costs shows beside it.

`--sweep-workers 1,2,4` runs the wrk rows at K=1 and K=--duplicates once
per number of gunicorn workers instead, and prints events/s and per-worker
efficiency (pin wrk apart with --wrk-cpus).

The machine is shared, so the rows run in rounds (each row once per round,
in order) and every ratio is taken between rows of the same round; the
table shows medians over rounds and each round's value.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from webhooks.commands.serve import nginx_binary
from webhooks.core import partitions
from webhooks.infra.config import Settings
from webhooks.providers import Outgoing
from webhooks.traffic import audit, samples, sender
from webhooks.traffic import stripe as stripe_traffic
from webhooks.traffic.report import markdown_table, percentile
from webhooks.web.front import INSTALL

from . import apps, cpu, outbox, pgbench, profile, returns, servers, wrk

SECRET = "whsec_bench_0123456789"
LOCAL_SERVER = "postgresql://root@127.0.0.1:5432/test"
WARM_UP_EVENTS = 300
ROWS = (
    "service",
    "service_dup",
    "trivial",
    "pgbench",
    "naive",
    "service_big",
    "wrk_service",
    "wrk_service_front",
    "pgbench_paced",
    "wrk_service_big",
    "wrk_service_dup",
    "seed",
    "seed_dup",
    "wrk_trivial",
    "pgbench_notify",
    "outbox_drain",
    "outbox_drain_2",
    "outbox_drain_slow",
    "outbox_drain_slow_2",
    "outbox_wakeup",
    "return_call",
)
# Per outbox row: its workers, and how long its receiver takes to answer (ms).
_OUTBOX_ROWS = {
    "outbox_drain": (1, 0),
    "outbox_drain_2": (2, 0),
    "outbox_drain_slow": (1, 100),
    "outbox_drain_slow_2": (2, 100),
    "outbox_wakeup": (1, 0),
}
_PGBENCH_ROWS = ("pgbench", "pgbench_paced", "pgbench_notify")
# What --sweep-workers runs at each number of web workers.
_SWEPT = ("wrk_service", "wrk_service_dup")
# Rows driven by wrk: (what serves, K > 1, on the pre-filled ledger); the seed
# rows serve the article's Node handler.
_WRK_ROWS = {
    "wrk_service": ("service", False, False),
    "wrk_service_dup": ("service", True, False),
    "wrk_service_front": ("front", False, False),
    "wrk_service_big": ("service", False, True),
    "seed": ("seed", False, False),
    "seed_dup": ("seed", True, False),
    "wrk_trivial": ("trivial", False, False),
}
_BIG_ROWS = ("service_big", "wrk_service_big")
# --profile records the first of these that runs, in its first round.
_PROFILED_ROWS = ("service", "wrk_service")
_COMPLETED = {
    "service": "SELECT count(*) FROM webhook_events WHERE status = 'completed'",
    "front": "SELECT count(*) FROM webhook_events WHERE status = 'completed'",
    "seed": "SELECT count(*) FROM idempotency_keys WHERE status = 'completed'",
}
DOUBLE_FULFILMENTS = "SELECT count(*) - count(DISTINCT payment_id) FROM fulfilments"
# Environment that changes how the rows are served: shown with the results.
_SETTINGS = (
    "WEB_CONCURRENCY",
    "GUNICORN_WORKER_CLASS",
    "GUNICORN_THREADS",
    "GUNICORN_CMD_ARGS",
    "WEBHOOK_POOL_MAX_SIZE",
)

# One row a second back from now, in the ledger and its payload months
# (made first: webhooks/core/partitions.py).
_PREFILL = """
WITH claimed AS (
    INSERT INTO webhook_events
        (provider, event_id, event_type, status, outcome, response_status,
         response_body, received_at, completed_at)
    SELECT 'stripe', 'evt_fill_' || md5(g::text),
           (ARRAY['checkout.session.completed', 'payment_intent.succeeded', 'charge.succeeded'])[1 + g %% 3],
           'completed', 'ignored', 200, '{}',
           now() - g * interval '1 second', now() - g * interval '1 second'
    FROM generate_series(1, %s) AS g
    RETURNING id, received_at
)
INSERT INTO webhook_payloads (ledger_id, received_at, payload)
SELECT id, received_at, '{"object":"event"}' FROM claimed
"""


@dataclass
class Measure:
    """One row in one round."""

    events_per_s: float
    deliveries_per_s: float
    p99_ms: float
    notes: Counter = field(default_factory=Counter)
    # CPU microseconds per HTTP attempt: web workers, their PostgreSQL backends, load generator.
    cpu_us: dict[str, float] = field(default_factory=dict)
    # Share of the machine's CPU left idle during the row's window.
    idle: float = math.nan
    p50_ms: float = math.nan
    # Instructions retired per HTTP attempt, by the same parts (perf stat; empty where it cannot count).
    instructions: dict[str, float] = field(default_factory=dict)


def _row_names(text: str) -> list[str]:
    names = text.split(",")
    unknown = [name for name in names if name not in ROWS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    return names


def _worker_counts(text: str) -> list[int]:
    try:
        counts = [int(n) for n in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers of workers, such as 1,2,4")
    return sorted(set(counts))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=16,
        help="HTTP connections and pgbench clients (default %(default)s)",
    )
    parser.add_argument(
        "--seconds", type=int, default=3, help="length of a row in one round (default %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default %(default)s)")
    parser.add_argument(
        "--duplicates",
        "-k",
        type=int,
        default=4,
        help="deliveries per event in the duplicate rows (default %(default)s)",
    )
    parser.add_argument(
        "--ledger-rows",
        type=int,
        default=10_000_000,
        help="rows pre-filled for the ledger-scale row (default %(default)s)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or LOCAL_SERVER,
        help="server to create private schemas on (default: $DATABASE_URL or %(default)s)",
    )
    parser.add_argument(
        "--rows",
        type=_row_names,
        help=f"comma-separated subset of {','.join(ROWS)}, in that order (default: all)",
    )
    parser.add_argument("--wrk-cpus", help="taskset CPU list for wrk (default: not pinned)")
    parser.add_argument(
        "--sweep-workers",
        type=_worker_counts,
        help="comma-separated numbers of gunicorn workers (WEB_CONCURRENCY): run the rows "
        f"{', '.join(_SWEPT)} at each and print events/s and per-worker efficiency, instead of --rows",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="record py-spy stacks of the service's workers here, over the first round "
        "of the service or wrk_service row, whichever runs first",
    )
    args = parser.parse_args(argv)
    if args.sweep_workers and args.rows is not None:
        parser.error("--sweep-workers runs its own rows: leave out --rows")
    if args.rows is None:
        args.rows = list(_SWEPT if args.sweep_workers else ROWS)
    if args.profile and not set(_PROFILED_ROWS) & set(args.rows):
        parser.error(f"--profile records one of the rows {', '.join(_PROFILED_ROWS)}: none is in --rows")
    if args.profile and shutil.which("py-spy") is None:
        parser.error("--profile needs py-spy (pip install py-spy)")
    needs = {"wrk": _WRK_ROWS, "node": ("seed", "seed_dup"), "pgbench": _PGBENCH_ROWS}
    if "wrk_service_front" in args.rows and nginx_binary(Settings.from_env()) is None:
        parser.error(f"the wrk_service_front row needs nginx ({INSTALL})")
    for tool, rows in needs.items():
        if set(rows) & set(args.rows) and shutil.which(tool) is None:
            parser.error(
                f"{tool} is not installed (Debian: apt-get install "
                f"{ {'pgbench': 'postgresql-client', 'node': 'nodejs npm'}.get(tool, tool) })"
            )
    return args


class Bench:
    def __init__(self, args: argparse.Namespace, empty: str, filled: str, seed: str, workdir: Path):
        self.args, self.empty, self.filled, self.seed, self.workdir = args, empty, filled, seed, workdir
        self.rates: dict[tuple, float] = {}  # last measured events/s, to size the next round
        self.profile_pending = args.profile
        # Why instructions are not counted (perf stat), or None when they are.
        self.no_instructions = cpu.instructions_unsupported()
        # gunicorn's WEB_CONCURRENCY for the wrk rows; None: gunicorn.conf.py's default.
        self.web_workers: int | None = None

    def titles(self) -> dict[str, str]:
        k, c = self.args.duplicates, self.args.concurrency
        return {
            "service": "service, K=1",
            "service_dup": f"service, K={k} duplicates racing",
            "trivial": "HTTP ceiling: trivial Flask endpoint, no DB",
            "pgbench": f"DB ceiling: pgbench -M prepared, {c} clients, the service's recorded SQL "
            "(p99: one payment's 3 transactions)",
            "pgbench_paced": "pgbench as above, paced at the service's K=1 wrk rate",
            "naive": f"naive check-then-insert, no unique index, K={k}",
            "service_big": f"service, K=1, ledger pre-filled with {self.args.ledger_rows:,} rows",
            "wrk_service": "service, K=1, wrk",
            "wrk_service_front": "service through its front (nginx, as `serve` runs it), K=1, wrk",
            "wrk_service_big": f"service, K=1, wrk, ledger pre-filled with {self.args.ledger_rows:,} rows",
            "wrk_service_dup": f"service, K={k} duplicates racing, wrk",
            "seed": "seed article's handler (Node: express + pg + stripe), K=1, wrk",
            "seed_dup": f"seed article's handler, K={k} duplicates racing, wrk",
            "wrk_trivial": "HTTP ceiling: trivial Flask endpoint, no DB, wrk",
            "pgbench_notify": "DB ceiling as above, with pgqueuer's NOTIFY trigger put back on the outbox",
            "outbox_drain": f"outbox: 1 default worker drains {outbox.BACKLOG:,} jobs into a fast receiver "
            "(jobs/s; CPU: the worker)",
            "outbox_drain_2": f"outbox: 2 default workers drain {outbox.BACKLOG:,} jobs "
            "(jobs/s; CPU: the workers)",
            "outbox_drain_slow": f"outbox: 1 default worker drains {outbox.BACKLOG:,} jobs into a receiver "
            "answering after 100 ms",
            "outbox_drain_slow_2": f"outbox: 2 default workers drain {outbox.BACKLOG:,} jobs into a receiver "
            "answering after 100 ms",
            "outbox_wakeup": "outbox wake-up: one job committed at a time, commit to receiver (p99 ms)",
            "return_call": "return call: POST .../fulfil of a new paid session, Stripe's API a stand-in "
            "(calls/s; CPU: not the stand-in's)",
        }

    def measure(self, row: str) -> Measure:
        k = self.args.duplicates
        spy_output = None
        if row in _PROFILED_ROWS:
            spy_output, self.profile_pending = self.profile_pending, None
        if row in _WRK_ROWS:
            served, racing, big = _WRK_ROWS[row]
            return self._wrk(served, k if racing else 1, self.filled if big else self.empty, spy_output)
        if row in _OUTBOX_ROWS:
            return self._outbox(row)
        if row in _PGBENCH_ROWS:
            # Paced at the rate the service's wrk row reached last (this round's when it ran).
            pace = self.rates.get(("service", 1, self.empty, None), 1500) if row == "pgbench_paced" else None
            notifying = pgbench.notify_trigger if row == "pgbench_notify" else contextlib.nullcontext
            with notifying(self.empty):
                outcome = pgbench.run(self.empty, self.args.concurrency, self.args.seconds, pace)
            rate = outcome.deliveries_per_s
            return Measure(
                rate,
                rate,
                percentile(outcome.latencies_ms, 99),
                cpu_us={"postgres": outcome.postgres_cpu_us},
                idle=outcome.idle,
            )
        if row == "trivial":
            return self._http("bench.apps:trivial", self.empty, 1)[1]
        if row == "return_call":
            return self._returns()
        if row == "naive":
            self._sql(self.empty, "TRUNCATE naive_fulfilments")
            measure = self._http("bench.apps:naive", self.empty, k)[1]
            measure.notes["double fulfilments"] = self._sql(self.empty, apps.DOUBLE_FULFILMENTS)[0][0]
            return measure
        conninfo = self.filled if row == "service_big" else self.empty
        duplicates = k if row == "service_dup" else 1
        events, measure, result = self._http("wsgi:app", conninfo, duplicates, spy_output)
        sent = [Outgoing(evt["id"], evt["type"]) for evt in events]
        checks = audit.checks(conninfo, stripe_traffic.TRAFFIC, sent, result.answers)
        measure.notes["audit passed" if all(c.passed for c in checks) else "AUDIT FAILED"] += 1
        return measure

    def _http(self, app: str, conninfo: str, duplicates: int, spy_output: Path | None = None):
        """Start gunicorn, warm up, run for about --seconds; (events sent, measure, result)."""
        key = (app, conninfo, duplicates)
        name = f"bench-{os.getpid()}"
        env = {
            "DATABASE_URL": make_conninfo(conninfo, application_name=name),
            "STRIPE_WEBHOOK_SECRET": SECRET,
        }
        with servers.gunicorn(app, env, self.workdir / "gunicorn.log") as (url, pid, _front):
            url += "/webhooks/stripe"
            warm = self._deliver(url, samples.payment_stream(WARM_UP_EVENTS), duplicates)
            rate = self.rates.get(key, warm.events_per_s)
            events = samples.payment_stream(max(WARM_UP_EVENTS, int(rate * self.args.seconds)))
            meter = cpu.Meter(cpu.children(pid), cpu.backends(conninfo, name))
            with _py_spy(pid, spy_output), meter:
                result = self._deliver(url, events, duplicates)
        self.rates[key] = result.events_per_s
        return events, _measure(result, meter), result

    def _wrk(self, served: str, duplicates: int, conninfo: str, spy_output: Path | None = None) -> Measure:
        """wrk for about --seconds; unique events/s and exactly-once read from the database."""
        conninfo = self.seed if served == "seed" else conninfo
        name = f"bench-{os.getpid()}"
        dsn = make_conninfo(conninfo, application_name=name)
        env = {
            "DATABASE_URL": servers.libpq_url(dsn) if served == "seed" else dsn,
            "STRIPE_WEBHOOK_SECRET": SECRET,
            **({"WEB_CONCURRENCY": str(self.web_workers)} if self.web_workers else {}),
        }
        serve = {
            "seed": servers.seed,
            "service": functools.partial(servers.gunicorn, "wsgi:app"),
            "front": servers.front,
            "trivial": functools.partial(servers.gunicorn, "bench.apps:trivial"),
        }[served]
        requests = self.workdir / "requests"
        key = (served, duplicates, conninfo, self.web_workers)
        with serve(env, self.workdir / "server.log") as (url, pid, front):
            wrk.write_requests(requests, url, SECRET, samples.payment_stream(WARM_UP_EVENTS), duplicates)
            wrk.run(url, requests, self.args.concurrency, 1, self.args.wrk_cpus)
            # Enough events that wrk never wraps round to replays within the window.
            count = int(self.rates.get(key, 1500 * (self.web_workers or 1)) * self.args.seconds * 1.5)
            count += WARM_UP_EVENTS
            wrk.write_requests(requests, url, SECRET, samples.payment_stream(count), duplicates)
            before = self._completed(served, conninfo)
            # The web tier is every process of the server: gunicorn's master and workers, or Node's one.
            meter = cpu.Meter(
                [pid, *cpu.children(pid)],
                cpu.backends(conninfo, name),
                front,
                instructions=self.no_instructions is None,
            )
            with _py_spy(pid, spy_output), meter:
                run = wrk.run(url, requests, self.args.concurrency, self.args.seconds, self.args.wrk_cpus)
        attempts = run.requests_per_s * run.seconds
        events = (self._completed(served, conninfo) - before) if served in _COMPLETED else attempts
        self.rates[key] = events / run.seconds
        notes = Counter({f"non-2xx: {run.non_2xx}": 1} if run.non_2xx else {})
        if served in _COMPLETED:
            doubled = self._sql(conninfo, DOUBLE_FULFILMENTS)[0][0]
            notes["no double fulfilment" if doubled == 0 else f"DOUBLE FULFILMENTS: {doubled}"] += 1
        used = {**meter.used, "client": run.cpu_s}
        return Measure(
            events / run.seconds,
            run.requests_per_s,
            run.p99_ms,
            notes,
            {part: seconds / attempts * 1e6 for part, seconds in used.items()},
            meter.idle,
            instructions={part: count / attempts for part, count in meter.instructions.items()},
        )

    def _outbox(self, row: str) -> Measure:
        workers, delay_ms = _OUTBOX_ROWS[row]
        with outbox.running(self.empty, workers, SECRET, self.workdir, delay_ms) as running:
            if row == "outbox_wakeup":
                jobs = max(50, 20 * self.args.seconds)
                done = running.wake_ups(jobs, random.Random())
            else:
                done = running.drain(outbox.BACKLOG)
        latencies = [s * 1000 for s in done.latencies_s]
        notes = Counter({"every job delivered" if done.arrived == done.jobs else "JOBS NOT DELIVERED": 1})
        if done.posts > done.arrived:
            notes["delivered again (at least once)"] += done.posts - done.arrived
        return Measure(
            done.jobs / done.seconds,
            done.posts / done.seconds,
            percentile(latencies, 99) if row == "outbox_wakeup" else math.nan,
            notes,
            {part: used / done.jobs * 1e6 for part, used in done.cpu_s.items() if part != "client"},
            done.idle,
            percentile(latencies, 50) if row == "outbox_wakeup" else math.nan,
        )

    def _returns(self) -> Measure:
        """gunicorn with the return call on, each call a new session: calls/s and CPU per call."""
        name = f"bench-{os.getpid()}"
        with returns.stand_in() as api:
            env = {
                "DATABASE_URL": make_conninfo(self.empty, application_name=name),
                "STRIPE_WEBHOOK_SECRET": SECRET,
                **returns.env(api),
            }
            with servers.gunicorn("wsgi:app", env, self.workdir / "gunicorn.log") as (url, pid, _front):
                returns.call_all(url, returns.sessions(api, WARM_UP_EVENTS), self.args.concurrency)
                rate = self.rates.get(("return_call",), 100.0)
                ids = returns.sessions(api, max(WARM_UP_EVENTS, int(rate * self.args.seconds)))
                meter = cpu.Meter(cpu.children(pid), cpu.backends(self.empty, name))
                with meter:
                    done = returns.call_all(url, ids, self.args.concurrency)
        self.rates[("return_call",)] = done.per_s
        return Measure(
            done.per_s,
            done.per_s,
            done.p99_ms,
            done.answers,
            {part: used / done.calls * 1e6 for part, used in meter.used.items()},
            meter.idle,
        )

    def _completed(self, served: str, conninfo: str) -> int:
        return self._sql(conninfo, _COMPLETED[served])[0][0] if served in _COMPLETED else 0

    def _deliver(self, url: str, events: list[dict], duplicates: int) -> sender.Result:
        deliveries = sender.plan(stripe_traffic.sent(events), duplicates, together=True)
        return sender.deliver(url, SECRET, deliveries, self.args.concurrency, progress=False)

    @staticmethod
    def _sql(conninfo: str, sql: str, params=None):
        with psycopg.connect(conninfo, autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else None


def _measure(result: sender.Result, meter: cpu.Meter) -> Measure:
    return Measure(
        result.events_per_s,
        result.deliveries_per_s,
        percentile(result.latencies_ms(), 99),
        Counter(f"HTTP {label}" for label, _ in result.attempts),
        {part: used / len(result.attempts) * 1e6 for part, used in meter.used.items()},
        meter.idle,
    )


class _py_spy:
    """py-spy recording every worker of a gunicorn for the duration of a block."""

    def __init__(self, pid: int, output: Path | None):
        self.pid, self.output, self.proc = pid, output, None

    def __enter__(self):
        if self.output:
            self.proc = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(self.pid),
                    "--subprocesses",
                    "--format",
                    "raw",
                    "--rate",
                    "200",
                    "--output",
                    str(self.output),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)  # attached before the load starts

    def __exit__(self, *exc):
        if self.proc:
            self.proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
            self.proc.wait(timeout=60)


def _combined(rates: list[float]) -> float:
    """What one core-sharing machine can do when every delivery costs both
    ceilings' work: their per-delivery times add up."""
    return 1 / sum(1 / rate for rate in rates)


def _ratio_specs(args: argparse.Namespace):
    """(label, numerator row, denominator rows, how the denominators combine)."""
    k, filled = args.duplicates, f"{args.ledger_rows:,}"
    return [
        (
            "**service / min(HTTP ceiling, DB ceiling)** (target >= 0.7)",
            "service",
            ("trivial", "pgbench"),
            min,
        ),
        ("service / combined ceiling 1 / (1/HTTP + 1/DB)", "service", ("trivial", "pgbench"), _combined),
        ("service / HTTP ceiling", "service", ("trivial",), min),
        ("service / DB ceiling", "service", ("pgbench",), min),
        (f"service K={k} / service K=1 (unique events/s)", "service_dup", ("service",), min),
        (f"naive K={k} / service K={k} (unique events/s)", "naive", ("service_dup",), min),
        (f"service on {filled} ledger rows / on an empty ledger", "service_big", ("service",), min),
        (
            f"service on {filled} ledger rows / on an empty ledger, wrk (target >= 0.95)",
            "wrk_service_big",
            ("wrk_service",),
            min,
        ),
        ("**service / seed article's handler, K=1 (wrk)** (target >= 1.0)", "wrk_service", ("seed",), min),
        (
            f"**service / seed article's handler, K={k} (wrk)** (target >= 1.0)",
            "wrk_service_dup",
            ("seed_dup",),
            min,
        ),
        ("service through its front / direct, K=1 (wrk)", "wrk_service_front", ("wrk_service",), min),
        (
            "service / combined ceiling 1 / (1/HTTP + 1/DB), wrk (target >= 0.8)",
            "wrk_service",
            ("wrk_trivial", "pgbench"),
            _combined,
        ),
        (
            "DB ceiling without a NOTIFY per job / with pgqueuer's NOTIFY trigger (pgbench, the "
            "fulfilment's SQL: notifying commits queue on one lock)",
            "pgbench",
            ("pgbench_notify",),
            min,
        ),
        (
            "outbox: 1 worker's drain / the 300 jobs/s target (target >= 1.0)",
            "outbox_drain",
            (),
            lambda _: _DRAIN_TARGET,
        ),
        (
            "outbox: 2 workers' drain / 1 worker's, fast receiver (2.0 where the cores allow)",
            "outbox_drain_2",
            ("outbox_drain",),
            min,
        ),
        (
            "outbox: 2 workers' drain / 1 worker's, receiver answering after 100 ms (target 2.0)",
            "outbox_drain_slow_2",
            ("outbox_drain_slow",),
            min,
        ),
        # The same yardstick held to the peer: how far the ceilings are from
        # what a handler doing less than ours reaches on this machine.
        (
            "seed article's handler / combined ceiling, wrk (for scale)",
            "seed",
            ("wrk_trivial", "pgbench"),
            _combined,
        ),
    ]


# What one default worker must drain on a 2-core machine.
_DRAIN_TARGET = 300.0


# (label, row, the pgbench row whose PostgreSQL CPU is the floor's database half)
_FLOOR_SPECS = [
    (
        "**CPU per delivery, web + postgres (K=1, wrk) / floor: a trivial request's web CPU "
        "+ pgbench's postgres CPU per delivery for the same SQL** (target <= 1.3)",
        "wrk_service",
        "pgbench",
    ),
    (
        "seed article's handler's CPU per delivery (server + postgres, K=1) / the same floor (for scale)",
        "seed",
        "pgbench",
    ),
    (
        "CPU per delivery (K=1, wrk) / the floor with pgbench paced at the service's rate (for scale: "
        "fewer transactions share each WAL flush)",
        "wrk_service",
        "pgbench_paced",
    ),
]


def _cpu_over_floor(measures: dict[str, Measure], row: str, database: str) -> float:
    """`row`'s CPU per delivery over the least the service's two halves can cost, in one round."""
    served = measures[row].cpu_us
    floor = measures["wrk_trivial"].cpu_us["workers"] + measures[database].cpu_us["postgres"]
    return (served["workers"] + served["postgres"]) / floor


def _cpu_through_front(measures: dict[str, Measure]) -> float:
    """CPU per delivery through the front (web + front + postgres) over direct (web + postgres).

    Both from one round.
    """
    front, direct = measures["wrk_service_front"].cpu_us, measures["wrk_service"].cpu_us
    return (front["workers"] + front["front"] + front["postgres"]) / (direct["workers"] + direct["postgres"])


def _cpu_per_call(measures: dict[str, Measure], row: str) -> float:
    return measures[row].cpu_us["workers"] + measures[row].cpu_us["postgres"]


def _median_ms(values: list[float]) -> str:
    return "-" if any(math.isnan(v) for v in values) else f"{statistics.median(values):.1f}"


def _wake_up_rows(rounds: list[dict[str, Measure]]) -> list[list[str]]:
    """The wake-up's p50 and p99 (ms, not ratios), beside the ratios of the same rounds."""
    p50 = [r["outbox_wakeup"].p50_ms for r in rounds]
    p99 = [r["outbox_wakeup"].p99_ms for r in rounds]
    return [
        _ratio_row("outbox wake-up p50, ms: commit to receiver (the worker polls)", p50),
        _ratio_row("outbox wake-up p99, ms (target <= 250)", p99),
    ]


def _median_cpu(measures: list[Measure], part: str) -> str:
    values = [m.cpu_us[part] for m in measures if not math.isnan(m.cpu_us.get(part, math.nan))]
    return f"{statistics.median(values):.0f}" if values else "-"


def _ratio_row(label: str, values: list[float]) -> list[str]:
    return [label, f"{statistics.median(values):.2f}", " / ".join(f"{v:.2f}" for v in values)]


# What the service's and the seed handler's processes each spent per delivery: (label, parts summed).
_PROCESSES = (
    ("web (gunicorn master + workers; the seed: its Node process)", ("workers",)),
    ("PostgreSQL backends", ("postgres",)),
    ("web + PostgreSQL", ("workers", "postgres")),
)


def _per_delivery(measure: Measure, parts: tuple[str, ...], instructions: bool = False) -> float:
    figures = measure.instructions if instructions else measure.cpu_us
    return sum(figures.get(part, math.nan) for part in parts)


def render_by_process(
    args: argparse.Namespace, rounds: list[dict[str, Measure]], no_instructions: str | None
) -> str:
    """CPU (and, where perf counts them, instructions) per delivery by process, service over seed per round.

    CPU per delivery moves less with the machine's other load than events/s
    does; each ratio is taken within a round and the table shows the median
    and the spread over rounds.
    """
    rows = [key for key in args.rows if key in rounds[0]]
    pairs = [
        (f"K={k}", service, seed)
        for k, service, seed in ((1, "wrk_service", "seed"), (args.duplicates, "wrk_service_dup", "seed_dup"))
        if service in rows and seed in rows
    ]
    table = []
    units = [("µs CPU", False)] + ([] if no_instructions else [("instructions", True)])
    for unit, instructions in units:
        for k, service, seed in pairs:
            for label, parts in _PROCESSES:
                ours = [_per_delivery(r[service], parts, instructions) for r in rounds]
                theirs = [_per_delivery(r[seed], parts, instructions) for r in rounds]
                ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
                table.append(
                    [
                        f"{k}, {unit}: {label}",
                        f"{statistics.median(ours):.0f}",
                        f"{statistics.median(theirs):.0f}",
                        f"**{statistics.median(ratios):.2f}**",
                        f"{min(ratios):.2f}-{max(ratios):.2f}",
                        " / ".join(f"{v:.2f}" for v in ratios),
                    ]
                )
        if "wrk_service_front" in rows:
            front = [_per_delivery(r["wrk_service_front"], ("front",), instructions) for r in rounds]
            table.append(
                [f"K=1, {unit}: front (nginx, the service through it)", f"{statistics.median(front):.0f}"]
                + ["-"] * 4
            )
    if not table:
        return ""
    lines = [
        markdown_table(
            [
                "per delivery (HTTP attempt), by process",
                "service",
                "seed article's handler",
                "service / seed, median",
                "spread",
                "per round",
            ],
            table,
        )
    ]
    if no_instructions:
        lines.append(f"Instructions per delivery: not counted, {no_instructions}.")
    return "\n\n".join(lines)


def render(
    args: argparse.Namespace,
    titles: dict[str, str],
    rounds: list[dict[str, Measure]],
    no_instructions: str | None = None,
) -> str:
    rows = [key for key in args.rows if key in rounds[0]]
    table = []
    for key in rows:
        measures = [r[key] for r in rounds]
        notes = sum((m.notes for m in measures), Counter())
        table.append(
            [
                titles[key],
                f"{statistics.median(m.events_per_s for m in measures):.0f}",
                f"{statistics.median(m.deliveries_per_s for m in measures):.0f}",
                _median_ms([m.p99_ms for m in measures]),
                " / ".join(f"{m.events_per_s:.0f}" for m in measures),
                *(_median_cpu(measures, part) for part in ("workers", "front", "postgres", "client")),
                f"{100 * statistics.median(m.idle for m in measures):.0f}",
                ", ".join(f"{label}: {n}" for label, n in sorted(notes.items())),
            ]
        )
    ratios = _wake_up_rows(rounds) if "outbox_wakeup" in rows else []
    for label, top, bottoms, combine in _ratio_specs(args):
        if top in rows and all(b in rows for b in bottoms):
            values = [r[top].events_per_s / combine([r[b].events_per_s for b in bottoms]) for r in rounds]
            ratios.append(_ratio_row(label, values))
    for label, row, database in _FLOOR_SPECS:
        if all(r in rows for r in (row, "wrk_trivial", database)):
            ratios.append(_ratio_row(label, [_cpu_over_floor(r, row, database) for r in rounds]))
    if {"return_call", "service"} <= set(rows):
        ratios.append(
            _ratio_row(
                "return call's CPU per call / a delivery's (service, K=1), web + postgres, "
                "the stand-in for Stripe's API not counted",
                [_cpu_per_call(r, "return_call") / _cpu_per_call(r, "service") for r in rounds],
            )
        )
    if {"wrk_service_front", "wrk_service"} <= set(rows):
        ratios.append(
            _ratio_row(
                "CPU per delivery through its front (web + front + postgres) / direct "
                "(web + postgres), K=1, wrk",
                [_cpu_through_front(r) for r in rounds],
            )
        )
    setup = (
        f"{os.cpu_count()} cores; {_serving()}; {args.concurrency} concurrent connections "
        f"(pgbench: clients); {args.rounds} rounds of about {args.seconds} s per row; medians over rounds"
    )
    by_process = render_by_process(args, rounds, no_instructions)
    return (
        "\n\n".join(
            [
                *([by_process] if by_process else []),
                markdown_table(
                    [
                        "row",
                        "unique events/s",
                        "deliveries/s",
                        "p99 ms",
                        "per round",
                        "CPU µs/attempt: web workers",
                        "front",
                        "postgres",
                        "load generator",
                        "machine idle %",
                        "totals",
                    ],
                    table,
                ),
                markdown_table(["ratio (same round)", "median", "per round"], ratios),
                setup,
            ]
        )
        + "\n"
    )


def _serving() -> str:
    """How gunicorn served the rows: its config's defaults, and the settings that overrode them."""
    overrides = [f"{name}={os.environ[name]}" for name in _SETTINGS if os.environ.get(name)]
    if overrides:
        return f"gunicorn.conf.py defaults with {', '.join(overrides)}"
    return "gunicorn.conf.py defaults (gthread, workers = cores, 8 threads each, keep-alive)"


def _swept(row: str, workers: int) -> str:
    return f"{row}@{workers}"


def render_sweep(args: argparse.Namespace, rounds: list[dict[str, Measure]]) -> str:
    """Per number of web workers: unique events/s at K=1 and K=--duplicates, and per-worker efficiency.

    Efficiency is events/s at N workers over N times events/s at the fewest
    swept, both from the same round: 100 % when workers add up.
    """
    fewest = args.sweep_workers[0]

    def rates(row: str, workers: int) -> list[float]:
        return [r[_swept(row, workers)].events_per_s for r in rounds]

    def efficiency(row: str, workers: int) -> str:
        ratios = [
            now * fewest / (workers * base)
            for now, base in zip(rates(row, workers), rates(row, fewest), strict=True)
        ]
        return f"{100 * statistics.median(ratios):.0f} %"

    table = []
    for workers in args.sweep_workers:
        measures = [r[_swept(row, workers)] for r in rounds for row in _SWEPT]
        notes = sum((m.notes for m in measures), Counter())
        table.append(
            [
                str(workers),
                *(
                    cell
                    for row in _SWEPT
                    for cell in (f"{statistics.median(rates(row, workers)):.0f}", efficiency(row, workers))
                ),
                f"{100 * statistics.median(r[_swept(_SWEPT[0], workers)].idle for r in rounds):.0f}",
                *(
                    _median_cpu([r[_swept(row, workers)] for r in rounds], part)
                    for row in _SWEPT
                    for part in ("workers", "postgres")
                ),
                *(" / ".join(f"{v:.0f}" for v in rates(row, workers)) for row in _SWEPT),
                ", ".join(f"{label}: {n}" for label, n in sorted(notes.items())),
            ]
        )
    k = args.duplicates
    pinned = f"wrk pinned to CPUs {args.wrk_cpus}" if args.wrk_cpus else "wrk not pinned (--wrk-cpus)"
    setup = (
        f"{os.cpu_count()} cores; {_serving()}; {pinned}; {args.concurrency} connections; "
        f"{args.rounds} rounds of about {args.seconds} s per row; per-worker efficiency: events/s at "
        f"N workers / (N x events/s at {fewest}), same round; medians over rounds"
    )
    header = [
        "gunicorn workers",
        "K=1 unique events/s",
        "per-worker efficiency",
        f"K={k} unique events/s",
        "per-worker efficiency",
        "machine idle % (K=1)",
        "K=1 CPU µs/delivery: web",
        "postgres",
        f"K={k} CPU µs/delivery: web",
        "postgres",
        "K=1 per round",
        f"K={k} per round",
        "totals",
    ]
    return markdown_table(header, table) + "\n\n" + setup + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rounds: list[dict[str, Measure]] = []
    with (
        servers.private_schema(args.database_url) as empty,
        servers.private_schema(args.database_url) as filled,
        servers.private_schema(args.database_url, migrated=False) as seed,
        tempfile.TemporaryDirectory() as tmp,
    ):
        servers.seed_schema(seed)
        bench = Bench(args, empty, filled, seed, Path(tmp))
        Bench._sql(empty, apps.NAIVE_TABLE)
        if set(_BIG_ROWS) & set(args.rows):
            started = time.perf_counter()
            with psycopg.connect(filled, autocommit=True) as conn:
                partitions.make(conn, datetime.now(UTC) - timedelta(seconds=args.ledger_rows))
            Bench._sql(filled, _PREFILL, [args.ledger_rows])
            Bench._sql(filled, "VACUUM ANALYZE webhook_events, webhook_payloads")
            # The pre-fill's gigabytes of WAL would otherwise be written back
            # by a checkpoint spread over the first rounds, whichever row runs.
            try:
                Bench._sql(filled, "CHECKPOINT")
            except psycopg.errors.InsufficientPrivilege:
                print(
                    "[bench] no CHECKPOINT (needs pg_checkpoint): the first rounds may pay for the pre-fill",
                    file=sys.stderr,
                )
            print(f"[bench] ledger pre-filled in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        for number in range(1, args.rounds + 1):
            rounds.append({})
            for workers in args.sweep_workers or [None]:
                bench.web_workers = workers
                for row in args.rows:
                    key = row if workers is None else _swept(row, workers)
                    rounds[-1][key] = bench.measure(row)
                    print(
                        f"[bench] round {number} {key}: {rounds[-1][key].events_per_s:.0f} events/s",
                        file=sys.stderr,
                    )
    print(f"$ python -m bench {shlex.join(argv if argv is not None else sys.argv[1:])}\n")
    print(
        render_sweep(args, rounds)
        if args.sweep_workers
        else render(args, bench.titles(), rounds, bench.no_instructions)
    )
    if args.profile:
        if not args.profile.is_file() or not args.profile.stat().st_size:
            print(
                f"bench: py-spy recorded no stacks in {args.profile} "
                "(it needs ptrace: root or CAP_SYS_PTRACE)",
                file=sys.stderr,
            )
            return 1
        print(profile.summary(args.profile))
    return 0
