"""`python -m bench.console`: the operator console's pages against a backlog of failed events.

Seeds a private schema (bench.servers.private_schema) with `--events`
failed events (a Stripe payment event's payload each, a payment of its
own, a customer's email in its metadata), then asks the console for each
page as a signed-in script does, on its own listener, and prints each
page's size and median time beside the budget the console is held to
(200 kB, 1 s).

Then a bulk reprocess of every one of them, confirmed on the console as an
operator does, runs as a job in `python -m webhooks worker` processes:
once to its end, and once (in a schema seeded afresh) with its worker
killed (SIGKILL) halfway and a new one started. Each prints its time, and
the double fulfilments counted from the fulfilments table and the outbox
(both 0 when each payment was fulfilled once); the second prints how many
finished events the resumed worker ran again (0: their completion is as it
was), and how many it only replayed (those the killed batch had completed
before its progress committed). DATABASE_URL names the server.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from webhooks.core import bulk
from webhooks.infra.config import Settings
from webhooks.traffic import samples
from webhooks.traffic.report import markdown_table
from webhooks.web import ADMIN, LISTENER
from webhooks.web.app import create_app

from .servers import private_schema

TOKEN = "bench-console-token-0123456789abcdef"
BUDGET_BYTES, BUDGET_S = 200_000, 1.0

_SEED = """
INSERT INTO webhook_failures (provider, event_id, event_type, error_class, error_message, payload, failed_at)
SELECT 'stripe', 'evt_bench_' || n, 'payment_intent.succeeded', 'ScriptedFailure', 'scripted failure 1',
       replace(replace(%(payload)s, 'pi_BENCH', 'pi_bench_' || n), 'evt_BENCH', 'evt_bench_' || n),
       now() - n * interval '1 second'
FROM generate_series(1, %(events)s) AS n
"""


def _payload() -> str:
    evt = samples.payment_events()[1]
    evt["id"] = "evt_BENCH"
    evt["data"]["object"]["id"] = "pi_BENCH"
    evt["data"]["object"]["metadata"] = {"order_id": "order_BENCH", "contact": "jane.doe@example.com"}
    return json.dumps(evt)


def _seeded(url: str, events: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_SEED, {"payload": _payload(), "events": events})


def _app(url: str):
    app = create_app(Settings.from_env({**os.environ, "DATABASE_URL": url, "WEBHOOK_ADMIN_TOKEN": TOKEN}))
    client = app.test_client()
    client.environ_base[LISTENER] = ADMIN
    return app, client


_AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _pages(client, events: int, repeat: int, job_id: int | None) -> list[list[str]]:
    pages = {
        "console": "/admin",
        "bulk confirmation": "/admin/reprocess",
        "find: every event": "/admin/events",
        "find: by payment id": f"/admin/events?q=pi_bench_{events // 2}",
        "an event": "/admin/events/stripe/evt_bench_1",
    }
    if job_id is not None:
        pages["bulk job's progress"] = f"/admin/jobs/{job_id}"
    rows = []
    for name, path in pages.items():
        took, size = [], 0
        for _ in range(repeat):
            start = time.perf_counter()
            answer = client.get(path, headers=_AUTH)
            took.append(time.perf_counter() - start)
            assert answer.status_code == 200, (path, answer.status_code)
            size = len(answer.data)
        median = statistics.median(took)
        rows.append(
            [
                name,
                path,
                f"{size / 1000:.1f}",
                f"{size / BUDGET_BYTES:.2f}",
                f"{median * 1000:.0f}",
                f"{median / BUDGET_S:.2f}",
            ]
        )
    return rows


def _start_job(client) -> tuple[int, float]:
    """Every failed event, counted and confirmed as the console's form does; the job's id, the POST's time."""
    confirm = client.get("/admin/reprocess", headers=_AUTH).get_data(as_text=True)
    form = dict(re.findall(r'<input type="hidden" name="([a-z]+)" value="([^"]*)">', confirm))
    form.pop("csrf", None)  # a script's Bearer header needs none
    start = time.perf_counter()
    answer = client.post("/admin/reprocess", data=form, headers=_AUTH)
    took = time.perf_counter() - start
    assert answer.status_code == 303, answer.get_data(as_text=True)
    return int(answer.headers["Location"].rsplit("/", 1)[1]), took


class _Worker:
    """`python -m webhooks worker` on the bench's schema; its deliveries go nowhere, then wait an hour."""

    def __init__(self, url: str):
        self.log = Path(tempfile.mkdtemp()) / "worker.log"
        env = {
            **os.environ,
            "DATABASE_URL": url,
            # Refused at once, then held back: every job the fulfilments enqueued stays to be counted.
            "WEBHOOK_OUTBOX_URL": "http://127.0.0.1:9/",
            "WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS": "3600",
            "WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS": "3600",
        }
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "webhooks", "worker"], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)


def _wait(conn: psycopg.Connection, job_id: int, worker: _Worker, until) -> bulk.Progress:
    while True:
        job = bulk.progress(conn, job_id)
        if job and until(job):
            return job
        if worker.proc.poll() is not None:
            raise RuntimeError(f"the worker exited:\n{worker.log.read_text()[-3000:]}")
        time.sleep(0.2)


_DOUBLES = """
SELECT (SELECT count(*) FROM (SELECT payment_id FROM fulfilments GROUP BY payment_id HAVING count(*) > 1) d),
       (SELECT count(*) FROM (SELECT dedupe_key FROM pgqueuer WHERE dedupe_key IS NOT NULL
                              GROUP BY dedupe_key HAVING count(*) > 1) d),
       (SELECT count(*) FROM fulfilments),
       (SELECT count(*) FROM pgqueuer WHERE dedupe_key IS NOT NULL)
"""
_COMPLETED = "SELECT event_id, completed_at FROM webhook_events WHERE status = 'completed'"
_DONE = "SELECT position, done_at FROM bulk_job_items WHERE job_id = %s AND done_at IS NOT NULL"
_REPLAYED = "SELECT count(*) FROM bulk_job_items WHERE job_id = %s AND result LIKE '%%already completed%%'"


def _whole_job(url: str, events: int, repeat: int) -> tuple[list[list[str]], list[str]]:
    """The pages, then the bulk reprocess of every failed event, run by one worker to its end."""
    _seeded(url, events)
    app, client = _app(url)
    try:
        job_id, post_s = _start_job(client)
        rows = _pages(client, events, repeat, job_id)
        with psycopg.connect(url, autocommit=True) as conn:
            start = time.perf_counter()
            worker = _Worker(url)
            try:
                job = _wait(conn, job_id, worker, lambda job: job.status != bulk.RUNNING)
            finally:
                worker.stop()
            whole = _row(conn, "whole job", post_s, job, time.perf_counter() - start, "-", "-")
    finally:
        app.extensions["webhooks.pool"].close()
    return rows, whole


def _row(
    conn: psycopg.Connection,
    run: str,
    post_s: float,
    job: bulk.Progress,
    took: float,
    redone: str,
    replayed: str,
) -> list[str]:
    """A run's line: its times and counts, and the doubles counted in the fulfilments and the outbox."""
    double_fulfilments, double_jobs, fulfilments, jobs = conn.execute(_DOUBLES).fetchone()
    counts = [fulfilments, jobs, double_fulfilments, double_jobs]
    return [
        run,
        f"{post_s * 1000:.0f}",
        f"{job.done}/{job.total}",
        str(job.ok),
        f"{took:.1f}",
        f"{job.done / took:.0f}",
        *map(str, counts),
        redone,
        replayed,
    ]


def _killed_halfway(url: str, events: int) -> list[str]:
    """The same job, its worker killed halfway, then resumed by a new one."""
    _seeded(url, events)
    app, client = _app(url)
    try:
        job_id, post_s = _start_job(client)
    finally:
        app.extensions["webhooks.pool"].close()
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        doomed = _Worker(url)
        _wait(conn, job_id, doomed, lambda job: job.done >= job.total // 2)
        doomed.stop(signal.SIGKILL)
        completed_before = dict(conn.execute(_COMPLETED).fetchall())
        done_before = dict(conn.execute(_DONE, [job_id]).fetchall())
        resumed = _Worker(url)
        try:
            job = _wait(conn, job_id, resumed, lambda job: job.status != bulk.RUNNING)
        finally:
            resumed.stop()
        took = time.perf_counter() - start
        completed_after = dict(conn.execute(_COMPLETED).fetchall())
        done_after = dict(conn.execute(_DONE, [job_id]).fetchall())
        # A finished event run again would have a new completion; an item taken again, a new done_at.
        redone = sum(completed_after.get(event) != at for event, at in completed_before.items())
        retaken = sum(done_after.get(position) != at for position, at in done_before.items())
        (replayed,) = conn.execute(_REPLAYED, [job_id]).fetchone()
        run = f"killed at {len(done_before)}, resumed"
        return _row(conn, run, post_s, job, took, str(redone + retaken), str(replayed))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-jobs", action="store_true", help="the pages only: no bulk job run")
    args = parser.parse_args()
    server = os.environ["DATABASE_URL"]
    if args.no_jobs:
        with private_schema(server) as url:
            _seeded(url, args.events)
            app, client = _app(url)
            rows = _pages(client, args.events, args.repeat, None)
            app.extensions["webhooks.pool"].close()
        jobs = []
    else:
        with private_schema(server) as url:
            rows, whole = _whole_job(url, args.events, args.repeat)
        with private_schema(server) as url:
            jobs = [whole, _killed_halfway(url, args.events)]
    print(f"{args.events} failed events; each page's median of {args.repeat}")
    print(markdown_table(["page", "path", "kB", "of 200 kB", "ms", "of 1 s"], rows))
    if jobs:
        print()
        print(f"bulk reprocess of every failed event as a job, run by the worker (batch {bulk.BATCH})")
        print(
            markdown_table(
                [
                    "run",
                    "POST ms",
                    "done",
                    "completed",
                    "s",
                    "events/s",
                    "fulfilments",
                    "outbox jobs",
                    "double fulfilments",
                    "double outbox jobs",
                    "finished events redone",
                    "replayed after resume",
                ],
                jobs,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
