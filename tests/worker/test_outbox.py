"""The outbox: enqueued with the fulfilment, delivered by worker processes at least
once, each delivery carrying the idempotency key that makes it effective once."""

import json
import time
import uuid
from datetime import UTC, datetime

import psycopg
import pytest

from bench import answers
from tests import conftest
from tests.conftest import load_json, post_event
from tests.support.downstream import Downstream, Worker, wait_until
from tests.support.rows import month_holding
from webhooks import bootstrap
from webhooks.core import outbox
from webhooks.infra.config import Settings
from webhooks.providers.stripe import NAME, parse
from webhooks.traffic import samples

FAST_RETRIES = {
    "WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS": 0.05,
    "WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS": 0.2,
    "WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS": 2,
}
# The channel pgqueuer's trigger notified (migrations/0010_outbox_pgqueuer.sql).
PGQUEUER_CHANNEL = "ch_pgqueuer"


@pytest.fixture
def downstreams():
    made = []

    def make(**kwargs) -> Downstream:
        made.append(Downstream(**kwargs))
        return made[-1]

    yield make
    for downstream in made:
        downstream.close()


@pytest.fixture
def workers(database_url):
    started = []

    def start(downstream: Downstream, **extra) -> Worker:
        env = conftest.service_env(
            database_url, WEBHOOK_OUTBOX_URL=downstream.url, **{**FAST_RETRIES, **extra}
        )
        started.append(Worker(env))
        return started[-1]

    yield start
    for worker in started:
        worker.stop()


def enqueue_jobs(database_url, count: int) -> list[str]:
    keys = [f"test.effect:{samples.stripe_id('pi')}" for _ in range(count)]
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        for key in keys:
            outbox.enqueue(conn, "test.effect", {"key": key}, key)
    return keys


def go_idle(database_url, downstream: Downstream) -> None:
    """Return once the worker is idle in its loop, so only its poll finds the next job.

    A first job delivered and cleared proves the loop runs; pgqueuer then
    re-checks for work a few times before it waits.
    """
    enqueue_jobs(database_url, 1)
    wait_until(lambda: downstream.received, 30, "a first delivery")
    with psycopg.connect(database_url, autocommit=True) as conn:
        wait_until(lambda: not outbox.depth(conn), 30, "the first job to be cleared")
    time.sleep(1)


def jobs_left(db) -> dict[str, int]:
    return {c.status: c.jobs for c in outbox.depth(db)}


def test_a_rolled_back_enqueue_leaves_no_job(database_url, db):
    with psycopg.connect(database_url, autocommit=True) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            outbox.enqueue(conn, "test.effect", {}, "key-rolled-back")
            raise RuntimeError("the claim's transaction failed")
    assert jobs_left(db) == {}


def test_a_paid_event_enqueues_one_job_keyed_by_its_payment(client, db):
    intent = samples.payment_events()[1]
    payment_id = intent["data"]["object"]["id"]
    assert post_event(client, intent).status_code == 200
    assert post_event(client, intent).status_code == 200  # redelivery: replayed, no second job
    [job] = outbox.pending(db)
    assert (job.status, job.kind) == ("queued", "order.fulfilled")
    assert job.idempotency_key == f"order.fulfilled:{payment_id}"


def test_a_connected_accounts_payment_is_keyed_by_its_globally_unique_id_and_names_the_account(client, db):
    intent = samples.payment_events()[1]
    intent["account"] = "acct_1OpsConnected"
    assert load_json(post_event(client, intent))["outcome"] == "fulfilled"
    [job] = outbox.pending(db)
    assert job.idempotency_key == f"order.fulfilled:{intent['data']['object']['id']}"
    payload = db.execute("SELECT convert_from(payload, 'UTF8')::jsonb FROM pgqueuer").fetchone()[0]
    assert payload["account"] == "acct_1OpsConnected"


def test_an_event_that_fulfils_nothing_enqueues_nothing(client, db):
    checkout, intent, charge = samples.payment_events()
    checkout["data"]["object"]["payment_status"] = "unpaid"
    for evt in (checkout, charge):
        post_event(client, evt)
    assert outbox.pending(db) == []


def test_two_workers_never_deliver_the_same_job(database_url, db, downstreams, workers):
    downstream = downstreams()
    # With the short heartbeat timeout: heartbeats that waited behind LISTEN
    # on a shared connection let the other worker retake jobs still in flight.
    first, second = workers(downstream), workers(downstream)
    # Both taking jobs before there are any: on a loaded machine one that started seconds
    # after the other found the queue already empty.
    first.wait_started()
    second.wait_started()
    keys = enqueue_jobs(database_url, 300)
    wait_until(lambda: len(downstream.received) >= len(keys), 60, "every delivery")
    time.sleep(0.5)  # a duplicate delivery would arrive now
    assert sorted(downstream.keys()) == sorted(keys)  # each exactly once
    wait_until(lambda: jobs_left(db) == {}, 30, "every job marked delivered")
    # Both did work: the test is about sharing a queue, not about one worker.
    assert "outbox_delivered" in first.output() and "outbox_delivered" in second.output()


def test_a_worker_sends_many_deliveries_on_each_connection_it_opens(database_url, downstreams, workers):
    downstream = downstreams()
    keys = enqueue_jobs(database_url, 300)
    workers(downstream)
    wait_until(lambda: len(downstream.received) >= len(keys), 60, "every delivery")
    # A connection per job would be one per key; a kept session is at most
    # one per delivery in flight (four batches of the default 16).
    assert len(downstream.connections) <= 64


def test_a_worker_killed_mid_delivery_is_redelivered_with_the_same_key(
    database_url, db, downstreams, workers
):
    downstream = downstreams(stall_first=True)
    [key] = enqueue_jobs(database_url, 1)
    doomed = workers(downstream)
    assert downstream.first_arrived.wait(30), doomed.output()
    doomed.kill()  # effect applied downstream, answer never read, job not marked done
    started = time.monotonic()
    workers(downstream)
    wait_until(lambda: len(downstream.received) >= 2, 60, "the redelivery")
    print(
        f"\n[outbox] redelivered {time.monotonic() - started:.1f}s after SIGKILL "
        f"(heartbeat timeout {FAST_RETRIES['WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS']}s)"
    )
    assert downstream.keys() == [key, key]
    assert downstream.effects == {key: 1}
    wait_until(lambda: jobs_left(db) == {}, 10, "the job to be marked delivered")


def test_a_worker_whose_database_connections_end_connects_again_and_delivers_every_job(
    database_url, db, downstreams, workers
):
    """As at a failover or a restart: the server ends every connection the worker holds."""
    downstream = downstreams()
    app_name = f"outbox-worker-{uuid.uuid4().hex[:8]}"
    worker = workers(downstream, PGAPPNAME=app_name)
    before = enqueue_jobs(database_url, 100)
    wait_until(lambda: len(downstream.received) >= len(before), 60, "the first jobs")
    for turn in range(1, 4):
        ended = conftest.terminate_backends(db, app_name)
        assert ended >= 2, worker.output()  # its queue and listener connections at least
        wait_until(lambda turn=turn: worker.started > turn, 30, "a reconnect")
    after = enqueue_jobs(database_url, 100)
    wait_until(lambda: downstream.effects.keys() >= {*before, *after}, 60, "the jobs after the reconnects")
    worker.assert_running()
    assert worker.reconnects == 3
    wait_until(lambda: jobs_left(db) == {}, 30, "every job marked delivered")


def test_a_failing_downstream_is_retried_with_backoff_then_dead_lettered(
    database_url, db, downstreams, workers
):
    downstream = downstreams(status=500)
    [key] = enqueue_jobs(database_url, 1)
    workers(downstream, WEBHOOK_OUTBOX_MAX_ATTEMPTS=3)
    wait_until(lambda: jobs_left(db).get(outbox.DEAD), 30, "the job to be dead-lettered")
    assert downstream.keys() == [key, key, key]
    [job] = outbox.pending(db)
    assert job.status == outbox.DEAD
    assert job.last_error == f"HTTP 500 Internal Server Error from {downstream.url}"


def test_a_fulfilment_commit_sends_no_notification(database_url, db):
    """PostgreSQL commits the transactions that notified one at a time, under a
    lock of the whole database (migrations/0040_outbox_without_notify_trigger.sql):
    a fulfilment's commit, which enqueues its job, must not be one of them."""
    settings = Settings.from_env(conftest.service_env(database_url))
    service = bootstrap.build(settings, min_size=1, max_size=1)
    db.execute(f"LISTEN {PGQUEUER_CHANNEL}")
    try:
        with service.pool.get().connection() as conn:
            fulfilling = conn.info.backend_pid  # the pool's one connection: the claim's
        intent = samples.payment_events()[1]
        assert service.accept(NAME, parse(samples.encode(intent).decode())).outcome == "fulfilled"
    finally:
        service.close()
    assert [job.kind for job in outbox.pending(db)] == ["order.fulfilled"]
    # The channel is the database's: other schemas' tests may notify on it.
    assert [n for n in db.notifies(timeout=1.0) if n.pid == fulfilling] == []


def test_an_idle_worker_takes_a_committed_job_within_its_poll(database_url, downstreams, workers):
    downstream = downstreams()
    workers(downstream)  # the default poll
    go_idle(database_url, downstream)
    committed = time.monotonic()
    enqueue_jobs(database_url, 1)
    wait_until(lambda: len(downstream.received) == 2, 10, "the second delivery")
    # Slack for a busy machine, and still far below the poll a NOTIFY used to back up.
    assert time.monotonic() - committed < 2.0


def test_the_delivered_body_is_the_enqueued_payload(database_url, downstreams, workers):
    downstream = downstreams()
    [key] = enqueue_jobs(database_url, 1)
    workers(downstream)
    wait_until(lambda: downstream.received, 30, "the delivery")
    [(sent_key, body)] = downstream.received
    assert sent_key == key
    assert json.loads(body) == {"kind": "test.effect", "key": key}


def test_answers_of_megabytes_cost_the_worker_no_memory_and_still_count_as_delivered(database_url):
    """Issue 33: a receiver answering 10 MB took a worker that read answers whole from 75 to 223 MiB."""
    baseline, large = answers.compare(database_url, answer_bytes=10 << 20, jobs=100)
    assert (large.delivered, large.posts) == (baseline.delivered, baseline.posts) == (100, 100)
    assert large.peak_mib - baseline.peak_mib < 16, answers.table(baseline, large)


@pytest.mark.parametrize("attempts", range(6))
def test_backoff_doubles_per_attempt_with_jitter_in_the_upper_half(attempts):
    step = min(300.0, 1.0 * 2**attempts)
    lowest = outbox.backoff_s(attempts, 1.0, 300.0, rand=lambda: 0.0)
    highest = outbox.backoff_s(attempts, 1.0, 300.0, rand=lambda: 1.0)
    assert (lowest, highest) == (step / 2, step)
    assert len({outbox.backoff_s(attempts, 1.0, 300.0) for _ in range(20)}) > 1


def test_backoff_is_capped():
    assert outbox.backoff_s(40, 1.0, 300.0, rand=lambda: 1.0) == 300.0


def test_a_worker_whose_log_month_is_missing_stops_loudly_and_its_restart_makes_it_and_delivers(
    database_url, db, downstreams, workers
):
    downstream = downstreams()
    first = workers(downstream)
    go_idle(database_url, downstream)  # past its start, where it made the coming months itself
    month = month_holding(db, "pgqueuer_log", datetime.now(UTC))
    key = f"test.effect:{samples.stripe_id('pi')}"
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        outbox.enqueue(conn, "test.effect", {"key": key}, key)
        conn.execute(f"DROP TABLE {month.name}")
    [(job_id,)] = db.execute("SELECT id FROM pgqueuer").fetchall()
    # Its pick would be logged nowhere: the pick fails whole, the job stays queued, the worker exits.
    assert first.proc.wait(30) != 0
    assert "SQLSTATE 23514 table pgqueuer_log" in first.output()
    assert len(downstream.received) == 1 and jobs_left(db) == {"queued": 1}

    # Its supervisor's restart: a worker makes the coming months as it starts.
    workers(downstream)
    wait_until(lambda: len(downstream.received) == 2, 60, "the delivery by the restarted worker")
    wait_until(lambda: jobs_left(db) == {}, 30, "the job marked delivered")
    assert downstream.keys()[1:] == [key]
    logged = db.execute(
        "SELECT status::text, tableoid::regclass::text FROM pgqueuer_log WHERE job_id = %s ORDER BY id",
        [job_id],
    ).fetchall()
    assert logged == [("picked", month.name), ("successful", month.name)]
