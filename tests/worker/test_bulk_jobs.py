"""Bulk jobs (core/bulk.py) as workers run them: a batch at a time, shared, resumed after a kill, once each.

Every event of a job goes through the claim a delivery takes, so a payment
is fulfilled once however many workers, redeliveries and resumes meet it.
"""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from tests import conftest
from tests.conftest import post_event, scripted_event, until_answered
from tests.support.downstream import Downstream, Worker, wait_until
from webhooks.core import bulk
from webhooks.traffic import samples
from webhooks.worker import loop


def failed_payments(client, count: int, **script) -> list[dict]:
    """Events whose first attempt failed (500) and whose next one fulfils a payment of their own."""
    made = [
        scripted_event(fail_attempts=1, payment_id=samples.stripe_id("pi"), **script) for _ in range(count)
    ]
    for evt in made:
        assert post_event(client, evt).status_code == 500
    return made


def started(db, events: list[dict]) -> int:
    return bulk.start(db, bulk.REPROCESS, {"status": "failed"}, [("stripe", evt["id"]) for evt in events])


def fulfilled(db) -> dict[str, int]:
    """Fulfilments per payment, and outbox jobs per idempotency key: what a double fulfilment would show."""
    rows = db.execute(
        "SELECT payment_id, count(*) FROM fulfilments GROUP BY payment_id UNION ALL"
        " SELECT dedupe_key, count(*) FROM pgqueuer WHERE dedupe_key IS NOT NULL GROUP BY dedupe_key"
    ).fetchall()
    return dict(rows)


def completed_at(db) -> dict[str, object]:
    return dict(db.execute("SELECT event_id, completed_at FROM webhook_events WHERE status = 'completed'"))


def test_each_batch_commits_its_items_and_a_crash_mid_batch_resumes_without_rerunning_the_batches_before(
    app, db, monkeypatch
):
    client = app.test_client()
    events = failed_payments(client, 5)
    job_id = started(db, events)
    service = app.extensions["webhooks.service"]
    monkeypatch.setattr(bulk, "BATCH", 2)
    asked: list[str] = []

    def crashing(provider, event_id, selection):
        asked.append(event_id)
        if len(asked) == 4:  # the second event of the second batch: the process dies
            raise KeyboardInterrupt
        [result] = service.reprocess_each([(provider, event_id)])
        return result.completed, result.said

    with psycopg.connect(db.info.dsn, autocommit=True) as conn:
        assert len(bulk.run_batch(conn, crashing).ran) == 2
        with pytest.raises(KeyboardInterrupt):
            bulk.run_batch(conn, crashing)
    assert bulk.progress(db, job_id).done == 2  # the first batch's, committed; the second's rolled back
    asked.clear()
    with psycopg.connect(db.info.dsn, autocommit=True) as conn:
        while service.run_bulk_batch(conn).ran:
            pass
    results = {item.event_id: item.result for item in bulk.items(db, job_id, 10)}
    # The first batch's events were never asked for again; the crashed batch's completed one only replayed.
    assert [results[evt["id"]] for evt in events] == [
        "200 fulfilled",
        "200 fulfilled",
        "200 replayed (already completed: stored answer)",
        "200 fulfilled",
        "200 fulfilled",
    ]
    job = bulk.progress(db, job_id)
    assert (job.status, job.done, job.ok) == ("finished", 5, 5)
    assert set(fulfilled(db).values()) == {1} and len(fulfilled(db)) >= 5


def test_two_workers_and_redeliveries_racing_through_one_job_fulfil_each_payment_once(app, db, monkeypatch):
    client = app.test_client()
    events = failed_payments(client, 30)
    job_id = started(db, events)
    service = app.extensions["webhooks.service"]
    monkeypatch.setattr(bulk, "BATCH", 4)
    barrier = threading.Barrier(3)
    ran: list[list[bulk.Ran]] = [[], []]
    finished: list[int] = []
    errors: list[BaseException] = []

    def worker(mine: list[bulk.Ran]) -> None:
        try:
            with psycopg.connect(db.info.dsn, autocommit=True) as conn:
                barrier.wait()
                while True:
                    batch = service.run_bulk_batch(conn)
                    if not batch.ran:
                        return
                    mine.extend(batch.ran)
                    finished.extend(job.id for job in batch.finished)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    def redeliveries() -> None:
        try:
            barrier.wait()
            for evt in reversed(events):
                until_answered(app, evt)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(mine,)) for mine in ran]
    threads.append(threading.Thread(target=redeliveries))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    positions = [item.position for mine in ran for item in mine]
    assert sorted(positions) == list(range(30))  # every item run, by one worker only
    assert all(ran), "both workers took batches"
    assert finished == [job_id]  # one closing line
    counts = fulfilled(db)
    assert set(counts.values()) == {1}
    payments = {evt["data"]["object"]["payment_id"] for evt in events}
    assert payments <= set(counts)


@pytest.fixture
def downstream():
    made = Downstream()
    yield made
    made.close()


@pytest.mark.system
def test_a_worker_killed_mid_job_leaves_it_to_the_next_which_redoes_no_finished_event(
    app, db, database_url, downstream
):
    client = app.test_client()
    # Each attempt holds its claim a while, so the job is still running when the worker dies.
    events = failed_payments(client, 12, sleep_s=0.25)
    job_id = started(db, events)
    env = conftest.service_env(database_url, WEBHOOK_OUTBOX_URL=downstream.url)
    doomed = Worker(env)
    try:
        wait_until(lambda: len(completed_at(db)) >= 4, 60, "a third of the job to complete")
    finally:
        doomed.kill()
    before = completed_at(db)
    assert 4 <= len(before) < 12
    assert bulk.progress(db, job_id).status == "running"
    resumed = Worker(env)
    try:
        wait_until(lambda: bulk.progress(db, job_id).status == "finished", 60, "the job to finish")
        wait_until(lambda: '"bulk_reprocess_finished"' in resumed.output(), 10, "its closing audit line")
    finally:
        resumed.proc.terminate()
        resumed.proc.wait(10)
    after = completed_at(db)
    assert len(after) == 12
    # An event finished before the kill was not run again: its completion stands as it was.
    assert {event_id: after[event_id] for event_id in before} == before
    results = {item.event_id: item.result for item in bulk.items(db, job_id, 20)}
    assert {results[event_id] for event_id in before} <= {
        "200 fulfilled",
        "200 replayed (already completed: stored answer)",
    }
    assert set(fulfilled(db).values()) == {1}
    [closing] = [
        json.loads(line) for line in resumed.output().splitlines() if '"bulk_reprocess_finished"' in line
    ]
    assert (closing["job_id"], closing["count"], closing["ok"]) == (job_id, 12, 12)


def test_a_stopping_worker_ends_after_the_batch_in_flight_and_leaves_the_rest_running(app, db, monkeypatch):
    events = failed_payments(app.test_client(), 5)
    job_id = started(db, events)
    monkeypatch.setattr(bulk, "BATCH", 2)
    asked = iter([False, True])  # SIGTERM arrives while the first batch runs
    assert loop.run_bulk_jobs(app.extensions["webhooks.service"], db, lambda: next(asked)) == 2
    job = bulk.progress(db, job_id)
    assert (job.status, job.done) == ("running", 2)


def test_an_event_whose_reprocess_raises_is_that_items_result_and_the_job_goes_on(app, db):
    events = failed_payments(app.test_client(), 3)
    job_id = started(db, events)
    service = app.extensions["webhooks.service"]

    def one_broken(provider, event_id, selection):
        if event_id == events[1]["id"]:
            raise KeyError("a bug on this event's path")
        [result] = service.reprocess_each([(provider, event_id)])
        return result.completed, result.said

    with psycopg.connect(db.info.dsn, autocommit=True) as conn:
        batch = bulk.run_batch(conn, one_broken)
    assert [item.ok for item in batch.ran] == [True, False, True]
    assert batch.ran[1].result.startswith("not run: KeyError: ")
    assert "a bug on this event" not in batch.ran[1].result  # its text may quote the payload
    assert [job.id for job in batch.finished] == [job_id]
