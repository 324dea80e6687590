"""Payloads by the month (webhook_payloads): made ahead, dropped whole, the answer outliving them."""

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests import conftest
from tests.conftest import post_event, scripted_event
from tests.support.commands import called
from tests.support.rows import LEDGER_WITH_PAYLOADS, count_rows, month_holding
from webhooks.core import partitions
from webhooks.traffic import samples


def _move_to(db, event_id: str, then: datetime) -> None:
    """Received at `then`: the ledger row and its payload, in that month's partition."""
    partitions.make(db, then)
    db.execute(
        "UPDATE webhook_payloads p SET received_at = %s FROM webhook_events e"
        " WHERE e.event_id = %s AND p.ledger_id = e.id",
        [then, event_id],
    )
    db.execute("UPDATE webhook_events SET received_at = %s WHERE event_id = %s", [then, event_id])


def _month_of(db, then: datetime) -> partitions.Month:
    return month_holding(db, "webhook_payloads", then)


def test_the_claim_and_its_payload_commit_together_or_not_at_all(client, db):
    paid = samples.payment_events()[1]
    assert post_event(client, paid).status_code == 200
    assert count_rows(db, LEDGER_WITH_PAYLOADS, "event_id = %s", [paid["id"]]) == 1
    failing = scripted_event(fail_attempts=1)
    assert post_event(client, failing).status_code == 500
    assert count_rows(db, "webhook_events") == count_rows(db, "webhook_payloads") == 1


def test_a_redelivery_after_its_payloads_month_was_dropped_gets_the_stored_answer(client, db):
    paid = samples.payment_events()[1]
    first = post_event(client, paid)
    then = datetime.now(UTC) - timedelta(days=100)
    _move_to(db, paid["id"], then)

    partitions.drop(db, _month_of(db, then))

    assert count_rows(db, "webhook_payloads") == 0
    again = post_event(client, paid)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.data == first.data
    assert count_rows(db, "fulfilments") == 1


def test_a_month_is_made_ahead_and_attached_while_a_claim_holds_its_lock(database_url, db):
    now = datetime.now(UTC)
    ahead = partitions.make(db, now, ahead=5)
    assert ahead  # the migration made two months ahead; five asks for more
    # A claim in flight holds the parent's lock (ROW EXCLUSIVE) until it commits:
    # attaching a month does not wait for it.
    with psycopg.connect(database_url) as claim:
        claim.execute("INSERT INTO webhook_payloads VALUES (0, now(), '{}')")
        assert partitions.make(db, now, ahead=7)
        claim.rollback()
    last = max((m for m in partitions.months(db) if m.table == "webhook_payloads"), key=lambda m: m.first)
    assert last.first > now + timedelta(days=6 * 28)


def test_a_detach_interrupted_in_its_second_step_is_finished_by_the_next_drop(db):
    then = datetime.now(UTC) - timedelta(days=200)
    partitions.make(db, then)
    month = _month_of(db, then)
    # What a DETACH ... CONCURRENTLY cancelled in its second transaction leaves behind.
    db.execute(
        "UPDATE pg_inherits SET inhdetachpending = true WHERE inhrelid = to_regclass(%s)", [month.name]
    )
    assert _month_of(db, then).detaching
    partitions.drop(db, _month_of(db, then))
    assert month.name not in {m.name for m in partitions.months(db)}
    assert db.execute("SELECT to_regclass(%s)", [month.name]).fetchone()[0] is None


def test_maintenance_makes_the_coming_months_and_drops_those_past_its_window(database_url, db):
    old = datetime.now(UTC) - timedelta(days=150)
    partitions.make(db, old)
    env = conftest.service_env(database_url)
    ran = called("maintenance", "--months-ahead", "4", "--drop-older-than", "90d", **env)
    assert ran.returncode == 0, ran.stderr
    assert "made" in ran.stdout
    ahead = datetime.now(UTC) + timedelta(days=4 * 31 - 15)
    names = {m.name for m in partitions.months(db)}
    for table in partitions.TABLES:
        assert _month_of_name(old, table) in ran.stdout and _month_of_name(old, table) not in names
        assert _month_of_name(ahead, table) in names


@pytest.mark.parametrize("months", ["10000", "-1", "two"])
def test_maintenance_refuses_months_ahead_it_would_not_bound(months, database_url):
    ran = called("maintenance", "--months-ahead", months, **conftest.service_env(database_url))
    assert ran.returncode == 2
    assert "--months-ahead" in ran.stderr and "Traceback" not in ran.stderr


def test_maintenance_refuses_a_window_inside_the_retry_horizon(database_url):
    ran = called("maintenance", "--drop-older-than", "1d", **conftest.service_env(database_url))
    assert ran.returncode == 2 and "retry horizon" in ran.stderr


def _month_of_name(at: datetime, table: str = "webhook_payloads") -> str:
    return f"{table}_p{at:%Y%m}"


def test_the_worker_makes_the_coming_months_itself(db):
    for table in partitions.TABLES:
        db.execute(f"DROP TABLE {_month_of_name(datetime.now(UTC) + timedelta(days=40), table)}")
    assert partitions.AHEAD.run(db) == 2
    assert partitions.AHEAD.run(db) == 0


def test_months_are_utc_months_whatever_the_sessions_time_zone(db):
    db.execute("SET TimeZone = 'America/New_York'")
    partitions.make(db, datetime(2025, 1, 15, tzinfo=UTC), ahead=0)
    db.execute("SET TimeZone = 'UTC'")
    bounds = db.execute(
        "SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = 'webhook_payloads_p202502'"
    ).fetchone()[0]
    assert bounds == "FOR VALUES FROM ('2025-02-01 00:00:00+00') TO ('2025-03-01 00:00:00+00')"
    names = {m.name for m in partitions.months(db)}
    assert {f"webhook_payloads_p2025{month:02}" for month in range(1, 13)} <= names
