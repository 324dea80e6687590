"""A database failover under a duplicate storm: the primary killed, its replica promoted.

Real servers (tests/support/pg_servers.py): a primary and a streaming replica, and
real gunicorn connected to both through one multi-host URL with
target_session_attrs=read-write, so that it finds the promoted replica by
itself. loadtest's sender delivers every event K times over many
connections, retrying as Stripe does; mid-storm the primary is killed with
`pg_ctl stop -m immediate` and the replica promoted. Every answer is
recorded and judged by the history checker (webhooks/traffic/checker.py)
against the new primary.

With asynchronous replication the primary's last commits can be gone with
it: events answered 200 that the new primary has never seen. After the
failover the runbook's step (docs/failover.md), `reconcile` then
`backfill --since` against the Stripe API (here its stand-in, holding every
event sent), brings each of them back, once. With a synchronous standby
nothing acknowledged is lost in the first place, at a cost in throughput
measured here against asynchronous replication on the same servers.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass

import psycopg
import pytest

from tests.conftest import SECRET, Gunicorn, service_env
from tests.support import pg_servers
from tests.support.commands import called
from tests.support.downstream import Downstream, Worker, delivered, wait_until
from tests.support.pg_servers import Cluster, Server, multi_host_url
from tests.support.reliability import sized
from tests.support.rows import count_rows
from tests.support.stripe_api import StripeApi, api_env
from webhooks.infra import migrate
from webhooks.infra.config import CONNECT_TIMEOUT_S, Settings
from webhooks.traffic import checker, samples, sender
from webhooks.traffic import stripe as stripe_traffic

# PostgreSQL servers of its own, started as the postgres user (root); the storms measure a cost,
# and a connection's time is bounded: no other test runs beside one (`alone`).
pytestmark = [pytest.mark.system, pytest.mark.alone]

# Stripe retries for days; the storm's senders keep at it long enough to see the promotion.
RETRY = sender.Retry(budget=60, base_s=0.05, cap_s=0.5)
COPIES, SENDERS = 3, 16
INVARIANT = "0 events or payments doubled"


def test_a_multi_host_url_gets_a_connect_timeout_and_asks_for_a_writable_server():
    settings = Settings.from_env({"DATABASE_URL": "postgresql://app@db1:5432,db2:5433/shop"})
    url = settings.database_url
    assert f"connect_timeout={CONNECT_TIMEOUT_S}" in url and "target_session_attrs=read-write" in url
    assert "host=db1,db2" in url and "port=5432,5433" in url


def test_what_the_url_says_of_its_own_is_kept():
    url = "postgresql://app@db1,db2/shop?connect_timeout=10&target_session_attrs=primary"
    assert Settings.from_env({"DATABASE_URL": url}).database_url == url


def test_a_single_host_url_gets_the_connect_timeout_only():
    url = Settings.from_env({"DATABASE_URL": "postgresql://app@db1/shop"}).database_url
    assert f"connect_timeout={CONNECT_TIMEOUT_S}" in url and "target_session_attrs" not in url


def test_a_url_libpq_cannot_parse_is_refused_in_one_line_that_does_not_repeat_it():
    with pytest.raises(ValueError) as refused:
        Settings.from_env({"DATABASE_URL": "postgresql://app:s3cret@db1/shop?nonsense=1"})
    assert "s3cret" not in str(refused.value)


def test_a_first_host_that_never_answers_does_not_stall_a_connection(figures):
    pg_servers.require()
    # A listener that never accepts: the handshake completes in the kernel and
    # then nothing answers, as with a hung server or a dropped route.
    with socket.socket() as silent, Cluster() as cluster:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        primary = cluster.primary()
        hosts = f"127.0.0.1:{silent.getsockname()[1]},127.0.0.1:{primary.port}"
        url = Settings.from_env({"DATABASE_URL": f"postgresql://postgres@{hosts}/postgres"}).database_url
        started = time.monotonic()
        with psycopg.connect(url) as conn:
            assert conn.info.port == primary.port
        took = time.monotonic() - started
    assert CONNECT_TIMEOUT_S <= took < CONNECT_TIMEOUT_S + 1.5
    figures.record(
        "a multi-host DATABASE_URL whose first host accepts TCP and never answers",
        f"the connection moves on to the next host after connect_timeout ({CONNECT_TIMEOUT_S} s, "
        "the service's default), not psycopg's 130 s",
        f"connected to the second host after {took:.2f} s",
        connect_s=took,
    )


@dataclass
class Failover:
    """What one storm through a failover measured."""

    verdict: checker.Verdict  # on the new primary, before any recovery
    result: sender.Result
    killed_at: float
    promote_s: float

    @property
    def lost(self) -> int:
        """Acknowledged events the new primary did not have: still missing, or claimed afresh
        by a later duplicate."""
        return len(self.verdict.acknowledged_lost) + len(self.verdict.reclaimed)


class Storm:
    """loadtest's sender in the background: `events` each delivered `COPIES` times, back to back."""

    def __init__(self, url: str, events: list[dict]):
        self.sent = stripe_traffic.sent(events)
        deliveries = sender.plan(self.sent, COPIES, together=True)
        self._result: sender.Result | None = None
        self._thread = threading.Thread(
            target=self._run, args=(url + "/webhooks/stripe", deliveries), daemon=True
        )
        self._thread.start()

    def _run(self, url: str, deliveries: list[sender.Delivery]) -> None:
        self._result = sender.deliver(url, SECRET, deliveries, SENDERS, retry=RETRY, progress=False)

    def join(self) -> sender.Result:
        self._thread.join(timeout=300)
        assert self._result is not None, "the storm did not finish"
        return self._result


@pytest.fixture
def cluster():
    pg_servers.require()
    with Cluster() as cluster:
        yield cluster


def _service(
    cluster: Cluster, synchronous: str | None, link_delay_s: float | None = None
) -> tuple[Server, Server, Gunicorn]:
    primary = cluster.primary()
    migrate.migrate(primary.url())
    replica = cluster.replica(primary, synchronous=synchronous, link_delay_s=link_delay_s)
    pg_servers.wait_replayed(primary, replica)
    url = multi_host_url([primary, replica])
    return primary, replica, Gunicorn(service_env(url, WEB_CONCURRENCY=4))


def _ledger_size(conn: psycopg.Connection) -> int:
    return count_rows(conn, "webhook_events")


def _fail_over_mid_storm(primary: Server, replica: Server, server: Gunicorn, events: list[dict]) -> Failover:
    """Kill the primary just after a third of the events committed there, promote the replica."""
    with primary.connect() as conn:
        kill_at_size = _ledger_size(conn) + len(events) // 3
        storm = Storm(server.url, events)
        wait_until(lambda: _ledger_size(conn) >= kill_at_size, 120, "a third of the storm", interval=0.002)
    killed_at = primary.kill()
    replica.promote()
    promote_s = time.monotonic() - killed_at
    result = storm.join()
    with replica.connect() as conn:
        verdict = checker.check(conn, result.answers, killed_at=killed_at)
    return Failover(verdict, result, killed_at, promote_s)


def _command(server_env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """In this process: what recovery is judged on is their answers and the rows they leave, not a
    process's start (tests/commands runs each as one)."""
    return called(*args, inherit=False, **server_env)


def _stripe_holding(api: StripeApi, events: list[dict]) -> list[dict]:
    """The stand-in holds every event sent, and the payments they tell of."""
    api.add("events", *events)
    for evt in events:
        obj = evt["data"]["object"]
        if obj["object"] == "checkout.session":
            api.add("checkout/sessions", obj)
        elif obj["object"] == "payment_intent":
            api.add("payment_intents", obj)
    return events


def _recover(url: str, api: StripeApi) -> tuple[int, int]:
    """The runbook's step: reconcile, then backfill. (payments reconcile found missing,
    events backfill applied)."""
    env = {**service_env(url), **api_env(api)}
    reconciled = _command(env, "reconcile", "--since", "1h", "--json")
    assert reconciled.returncode in (0, 1), reconciled.stderr
    drift = json.loads(reconciled.stdout or "[]")
    backfilled = _command(env, "backfill", "--since", "1h")
    assert backfilled.returncode == 0, backfilled.stderr
    total = next(line for line in backfilled.stdout.splitlines() if line.startswith("total "))
    applied = int(total.split()[-3])  # columns: seen, new, already had, failed
    after = _command(env, "reconcile", "--since", "1h")
    assert after.returncode == 0, after.stdout + after.stderr
    return len([d for d in drift if d["drift"] == "missing_locally"]), applied


def _audit(
    server: Server, failover: Failover, sent, outbox: checker.Outbox
) -> tuple[checker.Verdict, dict[str, int]]:
    with server.connect() as conn:
        verdict = checker.check(conn, failover.result.answers, killed_at=failover.killed_at, outbox=outbox)
        return verdict, stripe_traffic.audit(conn, [out for _, out in sent])


class OutboxWorker:
    """`python -m webhooks worker` delivering to a receiver that applies each
    Idempotency-Key once; it finds the new primary by itself."""

    def __init__(self, url: str):
        self.downstream = Downstream()
        env = service_env(
            url,
            WEBHOOK_OUTBOX_URL=self.downstream.url,
            # A job the dead primary's session had picked is retaken soon, and a failed one retried soon.
            WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS=2,
            WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS=0.05,
            WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS=0.5,
        )
        self.worker = Worker(env)
        # Connected to the primary before the kill, so the failover is one it lives through.
        self.worker.wait_started()

    def drain(self, conn: psycopg.Connection) -> checker.Outbox:
        """Once every fulfilled payment's job has been applied and none is waiting: the outbox's history.

        The worker finds the storm's backlog once it has reconnected: the
        wait grows with it.
        """
        backlog = count_rows(conn, "pgqueuer")
        return delivered(conn, self.downstream, 30 + backlog / 4)

    @property
    def redelivered(self) -> int:
        """Deliveries of a key the receiver had already applied."""
        return self.downstream.redelivered

    def stop(self) -> None:
        self.worker.stop()
        self.downstream.close()


def _failover_figures(failover: Failover) -> str:
    verdict = failover.verdict
    return (
        f"{verdict.events} events x {COPIES} copies over {SENDERS} connections; primary killed after "
        f"a third; replica promoted {failover.promote_s:.2f} s after the kill; first 2xx "
        f"{verdict.first_ok_after_kill_s:.2f} s after the kill; {failover.lost} acknowledged events "
        f"lost at failover ({len(failover.verdict.reclaimed)} of them claimed afresh by a later "
        f"duplicate); {failover.result.dropped} deliveries never answered 2xx"
    )


# On loopback the replica is barely behind, so little or nothing is lost. A
# link that lags (a replica in another region, or a busy one) and dies with
# the primary's machine loses what the primary acknowledged within that lag
# (docs/failover.md).
@pytest.mark.parametrize("link_delay_s", [None, 0.05], ids=["loopback", "link-50ms"])
def test_asynchronous_failover_loses_only_what_reconcile_and_backfill_bring_back_once(
    cluster, figures, link_delay_s
):
    primary, replica, server = _service(cluster, synchronous=None, link_delay_s=link_delay_s)
    url = multi_host_url([primary, replica])
    api = StripeApi()
    events = _stripe_holding(api, samples.payment_stream(sized(300, 1500)))
    outbox = OutboxWorker(url)
    try:
        failover = _fail_over_mid_storm(primary, replica, server, events)
        assert failover.verdict.doubled == 0, failover.verdict.checks()
        assert failover.verdict.first_ok_after_kill_s is not None
        missing_payments, applied = _recover(url, api)
        with replica.connect() as conn:
            jobs = outbox.drain(conn)
        outbox.worker.assert_running()
        assert outbox.worker.reconnects >= 1  # the primary it was connected to died under it
        verdict, audit = _audit(replica, failover, stripe_traffic.sent(events), jobs)
    finally:
        outbox.stop()
        server.stop(quick=True)
        api.close()

    assert failover.result.dropped == 0
    assert verdict.passed, verdict.checks()
    assert set(audit.values()) == {0}, audit
    # Every event lost at failover and not claimed again by a duplicate was backfilled.
    assert applied == len(failover.verdict.acknowledged_lost)
    figures.record(
        f"database failover under a duplicate storm, asynchronous replication over {_link(link_delay_s)} "
        "(pg_ctl stop -m immediate, pg_ctl promote, multi-host URL)",
        f"{INVARIANT} at any time; after `reconcile` + `backfill --since`, every acknowledged event "
        "in the ledger, every payment fulfilled once, every outbox job applied once",
        f"{_failover_figures(failover)}; reconcile found {missing_payments} payments missing, "
        f"backfill applied {applied} events; after recovery {verdict.summary()}; outbox: "
        f"{len(jobs.expected)} jobs applied once each, {outbox.redelivered} redeliveries absorbed "
        f"by their Idempotency-Key; the worker reconnected by itself {outbox.worker.reconnects} times "
        "and never exited",
        lost=failover.lost,
        recovered=applied + len(failover.verdict.reclaimed),
        first_ok_s=failover.verdict.first_ok_after_kill_s,
        promote_s=failover.promote_s,
    )


def _link(delay_s: float | None) -> str:
    if delay_s is None:
        return "loopback"
    return f"a link {delay_s * 1000:.0f} ms each way that dies with the primary"


def _storm_rate(server: Gunicorn, api: StripeApi, count: int) -> float:
    result = Storm(server.url, _stripe_holding(api, samples.payment_stream(count))).join()
    assert result.dropped == 0
    return result.deliveries_per_s


def _commit_ms(primary: Server, commits: int = 50) -> float:
    """The median time of a one-row commit on one connection."""
    times = []
    with primary.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS commit_probe (at timestamptz)")
        for _ in range(commits):
            started = time.perf_counter()
            conn.execute("INSERT INTO commit_probe VALUES (now())")
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _rates(
    primary: Server, replica: Server, server: Gunicorn, api: StripeApi
) -> dict[str, tuple[float, float]]:
    """(deliveries/s, one commit's ms) through the same servers, asynchronous and synchronous
    in turns, the best of each.

    A first storm warms the workers, pools and caches; the turns then share
    whatever else the machine is doing.
    """
    _storm_rate(server, api, sized(150, 300))
    rates: dict[str, list[float]] = {"async": [], "sync": []}
    commits: dict[str, list[float]] = {"async": [], "sync": []}
    for _ in range(sized(2, 3)):
        for mode, standby in (("async", ""), ("sync", replica.name)):
            primary.set(synchronous_standby_names=standby)
            if standby:
                pg_servers.wait_streaming(primary, standby, synchronous=True)
            commits[mode].append(_commit_ms(primary))
            rates[mode].append(_storm_rate(server, api, sized(150, 1500)))
    return {mode: (max(rates[mode]), min(commits[mode])) for mode in rates}


# A synchronous commit waits one round trip to the standby: next to nothing
# on loopback, the link's round trip over a delayed one (a standby in another zone).
@pytest.mark.parametrize("link_delay_s", [None, 0.005], ids=["loopback", "link-5ms"])
def test_synchronous_standby_failover_loses_nothing_acknowledged_at_a_measured_cost(
    cluster, figures, link_delay_s
):
    primary, replica, server = _service(cluster, synchronous="on", link_delay_s=link_delay_s)
    api = StripeApi()
    events = _stripe_holding(api, samples.payment_stream(sized(300, 1500)))
    try:
        # Ends on the synchronous standby.
        (async_rate, async_ms), (sync_rate, sync_ms) = _rates(primary, replica, server, api).values()
        failover = _fail_over_mid_storm(primary, replica, server, events)
        missing_payments, applied = _recover(multi_host_url([primary, replica]), api)
    finally:
        server.stop(quick=True)
        api.close()

    verdict = failover.verdict
    assert verdict.passed and not verdict.reclaimed, verdict.checks()
    assert failover.lost == 0
    assert (missing_payments, applied) == (0, 0)
    assert failover.result.dropped == 0
    figures.record(
        f"database failover under a duplicate storm, synchronous standby over {_link(link_delay_s)} "
        "(synchronous_commit = on, pg_ctl stop -m immediate, pg_ctl promote)",
        f"{INVARIANT}; 0 acknowledged events lost before any recovery (reconcile finds nothing, "
        "backfill applies nothing)",
        f"{_failover_figures(failover)}; on the same servers, best of turns: asynchronous "
        f"{async_rate:.0f} deliveries/s, synchronous {sync_rate:.0f} deliveries/s "
        f"({sync_rate / async_rate:.2f}x); a one-row commit {async_ms:.2f} ms asynchronous, "
        f"{sync_ms:.2f} ms synchronous",
        lost=failover.lost,
        async_deliveries_per_s=async_rate,
        sync_deliveries_per_s=sync_rate,
        async_commit_ms=async_ms,
        sync_commit_ms=sync_ms,
        first_ok_s=verdict.first_ok_after_kill_s,
    )
