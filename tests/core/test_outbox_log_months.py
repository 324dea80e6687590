"""The outbox's log by the month (pgqueuer_log): every write lands in its month or fails loudly."""

from datetime import UTC, datetime, timedelta

from pgqueuer.adapters.persistence.qb import QueryQueueBuilder

from tests.conftest import post_event
from tests.support.rows import count_rows, month_holding
from webhooks.core import partitions
from webhooks.traffic import samples

_QUERIES = QueryQueueBuilder()


def _log_month(at: datetime) -> str:
    return f"pgqueuer_log_p{at:%Y%m}"


def _this_month(db) -> partitions.Month:
    return month_holding(db, "pgqueuer_log", datetime.now(UTC))


def test_a_claim_whose_log_month_is_missing_fails_whole_and_succeeds_once_it_is_made(client, db):
    partitions.drop(db, _this_month(db))
    intent = samples.payment_events()[1]
    # The enqueue's log row has nowhere to go: the claim, its fulfilment and its job roll back with it.
    assert post_event(client, intent).status_code == 500
    assert (
        count_rows(db, "webhook_events") == count_rows(db, "pgqueuer") == count_rows(db, "fulfilments") == 0
    )

    assert _log_month(datetime.now(UTC)) in partitions.make(db, datetime.now(UTC))
    assert post_event(client, intent).status_code == 200
    assert count_rows(db, "pgqueuer") == count_rows(db, "pgqueuer_log") == 1


def test_pgqueuers_roll_up_and_job_status_read_and_update_the_log_across_its_months(client, db):
    post_event(client, samples.payment_events()[1])
    [(job_id,)] = db.execute("SELECT id FROM pgqueuer").fetchall()
    # A row of the same job logged months ago: the status comes from the newest.
    then = datetime.now(UTC) - timedelta(days=70)
    partitions.make(db, then)
    db.execute(
        "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, created)"
        " VALUES (%s, 'exception', 'webhooks.outbox', 0, %s)",
        [job_id, then],
    )
    where = db.execute(
        "SELECT tableoid::regclass::text FROM pgqueuer_log WHERE job_id = %s ORDER BY created", [job_id]
    ).fetchall()
    assert where == [(_log_month(then),), (_log_month(datetime.now(UTC)),)]

    db.execute(_QUERIES.build_aggregate_log_data_to_statistics_query())
    assert count_rows(db, "pgqueuer_log", "NOT aggregated") == 0
    assert db.execute("SELECT sum(count) FROM pgqueuer_statistics").fetchone()[0] == 2
    status = db.execute(_QUERIES.build_job_status_query().replace("$1", "%s"), [[job_id]]).fetchall()
    assert [(found, str(s)) for found, s in status] == [(job_id, "queued")]


def test_log_months_are_made_ahead_with_the_logs_own_autovacuum_settings(db):
    now = datetime.now(UTC)
    made = partitions.make(db, now, ahead=4)
    ahead = _log_month(partitions.first_of(now) + timedelta(days=4 * 31 - 15))
    assert ahead in made
    [options] = db.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [ahead]).fetchone()
    assert "autovacuum_vacuum_scale_factor=0.02" in options
    # The payloads' months keep the server's defaults.
    payloads = ahead.replace("pgqueuer_log", "webhook_payloads")
    assert db.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [payloads]).fetchone() == (None,)
