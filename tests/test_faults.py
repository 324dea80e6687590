"""Faults survived through real gunicorn and real PostgreSQL: nothing lost, nothing fulfilled twice.

Load is driven like Stripe drives it (tests/support/provider.py): every non-2xx is
retried until it succeeds, and the database is then checked: every event
completed, every payment fulfilled exactly once. Backends are only ever
terminated by this test's own application_name; restarts happen on a private
server.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import psutil
import psycopg
import pytest
import requests
from psycopg.conninfo import make_conninfo
from psycopg_pool import PoolTimeout

from tests.conftest import (
    Gunicorn,
    migrated_schema,
    scripted_event,
    service_env,
    signed_headers,
    terminate_backends,
)
from tests.support.provider import (
    Load,
    Provider,
    assert_exactly_once,
    attempts,
    failed_attempts,
    paid_deliveries,
    status_counts,
)
from tests.support.reliability import sized
from tests.support.rows import count_rows
from webhooks.infra.config import Settings
from webhooks.infra.db import open_pool
from webhooks.traffic import samples

EXACTLY_ONCE = "every delivery 2xx after retries; every event completed; each payment fulfilled exactly once"


@pytest.fixture
def app_name() -> str:
    return f"reliability-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def named_url(database_url: str, app_name: str) -> str:
    """The test schema's URL, with connections pg_stat_activity can tell apart."""
    return make_conninfo(database_url, application_name=app_name)


def _held_event(tmp_path: Path, payment_id: str, **script) -> tuple[dict, Path]:
    hold_file = tmp_path / f"hold-{uuid.uuid4().hex[:8]}"
    return scripted_event(hold_file=str(hold_file), payment_id=payment_id, **script), hold_file


def _holder(hold_file: Path, timeout: float = 20.0) -> tuple[int, int]:
    """(worker pid, backend pid) of the attempt holding the scripted claim."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parts = hold_file.read_text().split() if hold_file.exists() else []
        if len(parts) == 2:
            return int(parts[0]), int(parts[1])
        time.sleep(0.01)
    raise TimeoutError("no attempt took the claim")


def _claim_lifetime(db, backend_pid: int, timeout: float = 30.0) -> float:
    """Poll a backend until it is gone; the last seen age of its transaction (10 ms resolution)."""
    age = 0.0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = db.execute(
            "SELECT extract(epoch FROM clock_timestamp() - xact_start)::float8 "
            "FROM pg_stat_activity WHERE pid = %s",
            [backend_pid],
        ).fetchone()
        if row is None:
            return age
        age = row[0] or age
        time.sleep(0.01)
    raise TimeoutError(f"backend {backend_pid} still alive after {timeout} s")


def _workers(server: Gunicorn) -> set[int]:
    return {child.pid for child in psutil.Process(server.proc.pid).children()}


def _kill_worker(db, server: Gunicorn, worker: int, backend: int, timeout: float = 30.0):
    """SIGKILL `worker`; seconds until its backend is gone, and until gunicorn has replaced it."""
    count = len(_workers(server))
    killed_at = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    freed = replaced = None
    while (freed is None or replaced is None) and time.monotonic() < killed_at + timeout:
        now = time.monotonic() - killed_at
        if (
            freed is None
            and db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [backend]).fetchone() is None
        ):
            freed = now
        workers = _workers(server)
        if replaced is None and worker not in workers and len(workers) == count:
            replaced = now
        time.sleep(0.005)
    assert freed is not None and replaced is not None, (freed, replaced)
    return freed, replaced


def _fulfilments_of(db, payment_id: str) -> int:
    return count_rows(db, "fulfilments", "payment_id = %s", [payment_id])


def _failures_of(db, event_id: str) -> list[str]:
    return [
        r[0] for r in db.execute("SELECT error_class FROM webhook_failures WHERE event_id = %s", [event_id])
    ]


@pytest.mark.parametrize(
    "where, script",
    [("between statements", {"sleep_s": 30}), ("inside a statement", {"statement_s": 30})],
    ids=["idle-in-transaction", "in-statement"],
)
def test_sigkilled_worker_holding_a_claim_loses_nothing_and_is_replaced(
    gunicorn, named_url, db, workers_tmp, figures, where, script
):
    server = gunicorn(DATABASE_URL=named_url, WEB_CONCURRENCY=3)
    provider = Provider(server.url)
    events, payment_ids = paid_deliveries(sized(5, 100))
    held, hold_file = _held_event(workers_tmp, "pi_sigkill_held", **script)
    held_load = Load(provider, [held], senders=1)
    load = Load(provider, events, senders=4)
    worker, backend = _holder(hold_file)
    load.wait_delivered(len(events) // 3)
    freed_s, replaced_s = _kill_worker(db, server, worker, backend)
    [held_delivery] = held_load.join()
    deliveries = load.join()

    assert_exactly_once(db, deliveries + [held_delivery], payment_ids | {"pi_sigkill_held"})
    assert held_delivery.attempts[0].status is None  # the kill cut the provider's connection
    # Between statements the backend sees the socket close at once; inside
    # one it checks every client_connection_check_interval (1 s).
    assert freed_s < 5.0
    figures.record(
        f"SIGKILL of the gunicorn worker holding a claim ({where}), under load",
        "the claim is rolled back by PostgreSQL, the retry fulfils the event once, "
        "gunicorn replaces the worker; " + EXACTLY_ONCE,
        f"claim freed {freed_s * 1000:.0f} ms after the kill; worker replaced after "
        f"{replaced_s:.2f} s; held event delivered after "
        f"{len(held_delivery.attempts)} attempts; {len(payment_ids) + 1} payments fulfilled once, "
        f"{len(deliveries)} concurrent deliveries all 2xx, attempts by status {status_counts(deliveries)}",
        freed_ms=freed_s * 1000,
        replaced_s=replaced_s,
    )


def test_terminated_backends_heal_and_lose_nothing(gunicorn, named_url, app_name, db, figures):
    server = gunicorn(DATABASE_URL=named_url)
    events, payment_ids = paid_deliveries(sized(15, 300))
    load = Load(Provider(server.url), events, senders=8)
    load.wait_delivered(len(events) // 4)
    kills = []
    for _ in range(sized(3, 10)):
        killed = terminate_backends(db, app_name)
        kills.append((time.monotonic(), killed))
        time.sleep(0.1)
    deliveries = load.join()

    assert_exactly_once(db, deliveries, payment_ids)
    failed = failed_attempts(deliveries)
    assert {a.status for a in failed} <= {503}, status_counts(deliveries)
    first_kill, last_kill = kills[0][0], kills[-1][0]
    # Only requests that had a connection when it was killed can fail; the
    # pool checks every connection it hands out after that.
    assert all(a.started < last_kill + 1.0 for a in failed)
    figures.record(
        f"pg_terminate_backend on all the service's connections, {len(kills)} times 0.1 s apart, under load",
        "answers are 503 only for requests caught by a kill, the pool reconnects; " + EXACTLY_ONCE,
        f"{sum(k for _, k in kills)} backends terminated; {len(failed)} of "
        f"{len(attempts(deliveries))} attempts answered 503, the last of them begun "
        f"{_offset_ms(max((a.started for a in failed), default=first_kill) - last_kill)} the last kill, "
        f"the slowest after {max((a.seconds for a in failed), default=0):.2f} s; "
        f"{len(payment_ids)} payments fulfilled once",
        terminated=sum(k for _, k in kills),
        failed=len(failed),
    )


def _offset_ms(seconds: float) -> str:
    return f"{abs(seconds) * 1000:.0f} ms {'after' if seconds >= 0 else 'before'}"


@pytest.fixture
def private_database_url(private_server):
    with migrated_schema(private_server.get_uri()) as url:
        yield url


@pytest.fixture
def private_gunicorn(private_database_url):
    server = Gunicorn(service_env(private_database_url, WEB_CONCURRENCY=4))
    yield server
    server.stop()


def _pg_ctl(server, *args: str) -> None:
    from pgserver._commands import pg_ctl  # the binaries that own this data directory

    pg_ctl(["-w", *args], pgdata=server.pgdata, user=server.system_user, timeout=60)


def _stop(server) -> Path:
    """Stop fast (in-flight transactions are rolled back); the socket folder to start it again with."""
    socket_dir = server.get_postmaster_info().socket_dir
    _pg_ctl(server, "-m", "fast", "stop")
    return socket_dir


def _start(server, socket_dir: Path) -> None:
    # The options pgserver starts it with: no TCP, a socket in its own folder.
    _pg_ctl(server, "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(server.log), "start")


def _restart(server, downtime_s: float) -> None:
    if not downtime_s:
        _pg_ctl(server, "-m", "fast", "restart")
        return
    socket_dir = _stop(server)
    time.sleep(downtime_s)
    _start(server, socket_dir)


class ReadyProbe:
    """Polls /readyz in the background like a load balancer: no answer in time counts as unready.

    Remembers (monotonic time asked, time answered, status), status None for no answer.
    """

    def __init__(self, url: str, interval_s: float = 0.05, timeout_s: float = 3.0):
        self.answers: list[tuple[float, float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, interval_s, timeout_s), daemon=True)
        self._thread.start()

    def _run(self, url: str, interval_s: float, timeout_s: float) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            asked = time.monotonic()
            try:
                status = session.get(url + "/readyz", timeout=timeout_s).status_code
            except requests.RequestException:
                status = None
            self.answers.append((asked, time.monotonic(), status))
            time.sleep(interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def unready_window(self, after: float) -> tuple[float, float] | None:
        """From asking the first probe not answered ready to the next ready answer, or None."""
        later = [answer for answer in self.answers if answer[1] >= after]
        unready = next((asked for asked, _, status in later if status != 200), None)
        if unready is None:
            return None
        ready = next(answered for asked, answered, status in later if asked > unready and status == 200)
        return unready, ready


# The private server's tests time how soon service and pool come back: no other test runs
# beside one (`alone`).
@pytest.mark.parametrize("downtime_s", sized((0, 3), (0, 3, 10)))
@pytest.mark.alone
def test_postgres_restart_under_load_loses_nothing(
    private_server, private_gunicorn, private_database_url, figures, downtime_s
):
    server = private_gunicorn
    events, payment_ids = paid_deliveries(sized(15, 300))
    probe = ReadyProbe(server.url)
    load = Load(Provider(server.url, budget_s=60), events, senders=8)
    load.wait_delivered(len(events) // 4)
    stopped_at = time.monotonic()
    _restart(private_server, downtime_s)
    started_at = time.monotonic()
    deliveries = load.join()
    # After the load, keep probing until every worker has answered ready again.
    time.sleep(1.0)
    probe.stop()

    with psycopg.connect(private_database_url, autocommit=True) as db:
        assert_exactly_once(db, deliveries, payment_ids)
    failed = failed_attempts(deliveries)
    assert {a.status for a in failed} <= {503}, status_counts(deliveries)
    window = probe.unready_window(after=stopped_at)
    if downtime_s > 2:  # longer than /readyz waits for a connection
        assert window is not None, "/readyz never reported the outage"
    assert probe.answers[-1][2] == 200
    answered_after = [a.started + a.seconds - started_at for a in attempts(deliveries) if a.ok]
    answered_after = [t for t in answered_after if t > 0]
    assert answered_after, "the load ended before PostgreSQL was back"
    unready = (
        f"unready from {window[0] - stopped_at:.2f} s to {window[1] - stopped_at:.2f} s after the stop"
        if window
        else "never seen unready"
    )
    figures.record(
        f"PostgreSQL restart under load ({downtime_s} s down, private server)",
        ("/readyz goes unready, then ready" if downtime_s > 2 else "/readyz ready at the end")
        + "; failed answers are 503 only; "
        + EXACTLY_ONCE,
        f"PostgreSQL down {started_at - stopped_at:.2f} s from stop to ready; /readyz {unready}; "
        f"first 2xx {min(answered_after):.2f} s after PostgreSQL was back, {len(answered_after)} "
        f"after it; {len(failed)} of {len(attempts(deliveries))} attempts answered 503; "
        f"{len(payment_ids)} payments fulfilled once",
        down_s=started_at - stopped_at,
        unready_s=(window[1] - window[0]) if window else 0.0,
        first_ok_s=min(answered_after),
        failed=len(failed),
    )


def test_duplicates_of_a_handler_slower_than_the_lock_timeout_get_409_fast(
    gunicorn, database_url, db, tmp_path, figures
):
    senders, lock_ms, handler_s = 6, 500, 2.5
    # A worker per sender, so a 409's latency is the lock wait, not a queue.
    server = gunicorn(WEBHOOK_LOCK_TIMEOUT_MS=lock_ms, WEB_CONCURRENCY=senders + 1)
    evt = scripted_event(sleep_s=handler_s, payment_id="pi_slow_handler")
    deliveries = Load(Provider(server.url), [evt] * senders, senders).join()

    assert_exactly_once(db, deliveries, {"pi_slow_handler"})
    conflicts = [a for a in attempts(deliveries) if a.status == 409]
    assert conflicts
    slowest_409 = max(a.seconds for a in conflicts)
    assert slowest_409 < handler_s  # never waits for the winner's whole handler
    assert sum(not a.replayed for a in attempts(deliveries) if a.ok) == 1
    figures.record(
        f"handler ({handler_s} s) slower than the lock timeout ({lock_ms} ms), "
        f"{senders} concurrent duplicates",
        "duplicates answer 409 within the lock timeout, never after the handler; "
        "the winner commits once; every retry then gets the stored answer",
        f"{len(conflicts)} answers 409, slowest {slowest_409 * 1000:.0f} ms; 1 fulfilment; "
        f"first attempts by status {dict(Counter(d.attempts[0].status for d in deliveries))}; "
        f"all attempts by status {status_counts(deliveries)}",
        slowest_409_ms=slowest_409 * 1000,
    )


def test_hung_transaction_is_freed_by_the_idle_in_transaction_timeout(
    gunicorn, named_url, db, workers_tmp, figures
):
    idle_ms, hang_s = 1500, 6
    server = gunicorn(
        DATABASE_URL=named_url, WEBHOOK_IDLE_IN_TRANSACTION_TIMEOUT_MS=idle_ms, WEBHOOK_LOCK_TIMEOUT_MS=300
    )
    held, hold_file = _held_event(workers_tmp, "pi_hung", sleep_s=hang_s)
    load = Load(Provider(server.url), [held] * 3, senders=3)
    _, backend = _holder(hold_file)
    lifetime = _claim_lifetime(db, backend)
    deliveries = load.join()

    assert_exactly_once(db, deliveries, {"pi_hung"})
    assert idle_ms / 1000 - 0.1 < lifetime < idle_ms / 1000 + 2.0
    # The hung worker wakes to a dead session: 503, recorded on a fresh connection.
    assert 503 in {a.status for a in attempts(deliveries)}
    assert _failures_of(db, held["id"])
    figures.record(
        f"transaction hung idle with a claim (handler stalls {hang_s} s; "
        f"idle_in_transaction_session_timeout {idle_ms} ms)",
        "PostgreSQL ends the session and frees the claim within the timeout; a retry fulfils "
        "the event once; the stalled worker answers 503 and its failure is recorded",
        f"claim held {lifetime:.2f} s (bound {idle_ms / 1000:.1f} s); failures recorded: "
        f"{', '.join(_failures_of(db, held['id']))}; attempts by status {status_counts(deliveries)}",
        held_s=lifetime,
    )


def test_statement_timeout_answers_503_records_the_failure_and_the_retry_succeeds(
    gunicorn, database_url, db, workers_tmp, figures
):
    timeout_ms = 300
    server = gunicorn(WEBHOOK_STATEMENT_TIMEOUT_MS=timeout_ms)
    slow, _ = _held_event(workers_tmp, "pi_slow_statement", statement_s=5)
    [delivery] = Load(Provider(server.url), [slow], senders=1).join()

    assert_exactly_once(db, [delivery], {"pi_slow_statement"})
    first, *_, last = delivery.attempts
    assert first.status == 503
    assert first.seconds < 2.0  # cut at the timeout, not after the 5 s statement
    assert _failures_of(db, slow["id"]) == ["QueryCanceled"]
    assert last.ok and not last.replayed
    figures.record(
        f"fulfilment statement slower than statement_timeout ({timeout_ms} ms)",
        "503, the claim rolled back, the failure recorded on a separate transaction, the retry fulfils once",
        f"first answer 503 after {first.seconds * 1000:.0f} ms; failure recorded as "
        f"QueryCanceled; fulfilled on attempt {len(delivery.attempts)}",
        first_answer_ms=first.seconds * 1000,
    )


def _try_connection(pool, timeout: float) -> bool:
    try:
        with pool.connection(timeout=timeout) as conn:
            conn.execute("SELECT 1")
        return True
    except (PoolTimeout, psycopg.OperationalError):
        return False


@pytest.mark.alone
def test_pool_connects_promptly_once_postgres_is_back(private_server, private_database_url, figures):
    """psycopg_pool doubles its reconnect delay (1, 2, 4, 8 s...) for as long as the
    server is down; unbounded, an outage of D seconds kept the service down up to 2D."""
    wait_s, down_s = 0.5, 4.0
    settings = Settings.from_env(service_env(private_database_url, WEBHOOK_POOL_TIMEOUT_SECONDS=wait_s))
    pool = open_pool(settings)
    try:
        assert _try_connection(pool, timeout=5)
        socket_dir = _stop(private_server)
        down_until = time.monotonic() + down_s
        while time.monotonic() < down_until:  # requests keep coming during the outage
            assert not _try_connection(pool, wait_s)
        _start(private_server, socket_dir)
        back_at = time.monotonic()
        while not _try_connection(pool, wait_s):
            assert time.monotonic() - back_at < 30
        served_after = time.monotonic() - back_at
    finally:
        pool.close()
    assert served_after < 1.5
    figures.record(
        f"PostgreSQL down {down_s:.0f} s while requests keep arriving (pool wait {wait_s} s)",
        "the pool's reconnect attempts stay bounded by the pool wait, so the first request "
        "after PostgreSQL is back gets a connection at once",
        f"first connection {served_after * 1000:.0f} ms after PostgreSQL was back",
        served_after_s=served_after,
    )


@pytest.mark.alone
def test_database_down_answers_503_within_a_second_and_the_first_retry_after_succeeds(
    private_server, private_database_url, figures
):
    server = Gunicorn(service_env(private_database_url, WEB_CONCURRENCY=2))
    try:
        socket_dir = _stop(private_server)
        events = [evt for _ in range(4) for evt in samples.payment_events()]
        down = [_timed_post(server.url, evt) for evt in events]
        ready_s, ready_status = _timed(lambda: requests.get(server.url + "/readyz", timeout=10))
        _start(private_server, socket_dir)
        retry_s, retry_status = _timed_post(server.url, events[0])
    finally:
        server.stop()

    assert {status for _, status in down} == {503}
    slowest = max(seconds for seconds, _ in down)
    assert slowest < 1.0
    assert ready_status == 503 and ready_s < 2.0
    assert retry_status == 200
    figures.record(
        "PostgreSQL down (private server stopped): deliveries and /readyz while it is down, "
        "then the first retry after it is back",
        "each delivery answers 503 within 1 s, /readyz 503 within 2 s, never a long pool wait; "
        "the first retry after the outage succeeds",
        f"{len(down)} deliveries answered 503, slowest after {slowest * 1000:.0f} ms; /readyz 503 "
        f"after {ready_s * 1000:.0f} ms; first retry after restart {retry_status} in "
        f"{retry_s * 1000:.0f} ms",
        slowest_503_ms=slowest * 1000,
        readyz_ms=ready_s * 1000,
    )


def _timed(call) -> tuple[float, int]:
    started = time.monotonic()
    status = call().status_code
    return time.monotonic() - started, status


def _timed_post(url: str, evt: dict) -> tuple[float, int]:
    body = samples.encode(evt)
    return _timed(
        lambda: requests.post(url + "/webhooks/stripe", data=body, headers=signed_headers(body), timeout=10)
    )
