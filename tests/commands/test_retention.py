"""`python -m webhooks prune`: old ledger rows go, fulfilments and exactly-once stay."""

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests import conftest
from tests.conftest import load_json, post_event, scripted_event, table_counts
from tests.support.commands import called
from tests.support.rows import LEDGER_WITH_PAYLOADS, count_rows
from webhooks.commands import prune as retention
from webhooks.core import bulk, partitions
from webhooks.traffic import samples


@pytest.fixture
def prune(database_url):
    def run(*argv, **env) -> tuple[int, str, str]:
        ran = called("prune", *argv, **conftest.service_env(database_url), **env)
        return ran.returncode, ran.stdout, ran.stderr

    return run


def age(db, days: int) -> None:
    """Make everything stored so far `days` old."""
    then = datetime.now(UTC) - timedelta(days=days)
    partitions.make(db, then)
    for table in ("webhook_payloads", "webhook_events"):
        db.execute(f"UPDATE {table} SET received_at = %s", [then])
    db.execute("UPDATE webhook_failures SET failed_at = now() - make_interval(days => %s)", [days])


def test_bulk_jobs_that_ended_before_the_cutoff_go_with_their_items_and_a_running_one_stays(prune, db):
    ended, running, recent = (
        bulk.start(db, bulk.REPROCESS, {}, [("stripe", f"evt_{job}_{n}") for n in range(3)])
        for job in ("ended", "running", "recent")
    )
    db.execute(
        "UPDATE bulk_jobs SET status = 'finished', finished_at = now() - interval '40 days' WHERE id = %s",
        [ended],
    )
    db.execute("UPDATE bulk_jobs SET created_at = now() - interval '40 days' WHERE id = %s", [running])
    db.execute("UPDATE bulk_jobs SET status = 'cancelled', finished_at = now() WHERE id = %s", [recent])
    code, out, _ = prune("--older-than", "30d", "--batch-size", "2")
    assert code == 0 and "bulk_job_items=3 bulk_jobs=1" in out
    assert [row[0] for row in db.execute("SELECT id FROM bulk_jobs ORDER BY id")] == [running, recent]
    assert count_rows(db, "bulk_job_items") == 6


@pytest.mark.parametrize("window", ["2d", "71h", "30m"])
def test_a_window_inside_the_retry_horizon_is_refused(prune, client, db, window):
    post_event(client, samples.payment_events()[1])
    age(db, 1)
    code, _, err = prune("--older-than", window)
    assert code == 2 and "retry horizon" in err
    assert table_counts(db)["webhook_events"] == 1


def test_force_prunes_inside_the_retry_horizon(prune, client, db):
    post_event(client, samples.payment_events()[1])
    age(db, 1)
    assert prune("--older-than", "12h", "--force")[0] == 0
    assert table_counts(db)["webhook_events"] == 0


def test_old_rows_go_in_batches_new_rows_and_fulfilments_stay(prune, client, db):
    for evt in samples.payment_events() + [scripted_event(fail_attempts=9)]:
        post_event(client, evt)
    age(db, 40)
    recent = samples.payment_events()[1]
    post_event(client, recent)
    before = table_counts(db)
    assert before == {"webhook_events": 4, "webhook_failures": 1, "fulfilments": 2}

    code, out, _ = prune("--older-than", "30d", "--batch-size", "2")
    assert code == 0
    assert "webhook_events=3 webhook_failures=1" in out
    assert table_counts(db) == {"webhook_events": 1, "webhook_failures": 0, "fulfilments": 2}
    [(kept,)] = db.execute("SELECT event_id FROM webhook_events").fetchall()
    assert kept == recent["id"]


def test_a_duplicate_after_prune_is_still_fulfilled_only_once(prune, client, db):
    checkout, intent, _ = samples.payment_events()
    assert load_json(post_event(client, intent))["outcome"] == "fulfilled"
    age(db, 40)
    assert prune("--older-than", "30d")[0] == 0
    assert table_counts(db)["webhook_events"] == 0

    # The ledger forgot the event, so a late resend claims it again, and a
    # sibling event of the same payment arrives: the payment index answers both.
    again = post_event(client, intent)
    sibling = post_event(client, checkout)
    assert (again.status_code, load_json(again)["outcome"]) == (200, "already_fulfilled")
    assert (sibling.status_code, load_json(sibling)["outcome"]) == (200, "already_fulfilled")
    assert table_counts(db)["fulfilments"] == 1
    jobs = count_rows(db, "pgqueuer")
    assert jobs == 1  # and no second side effect was enqueued


def test_configured_fields_are_redacted_from_old_payloads_once(prune, client, db):
    checkout = samples.payment_events()[0]
    failing = scripted_event(fail_attempts=9, customer_details={"email": "jenny@example.com"})
    post_event(client, checkout)
    post_event(client, failing)
    age(db, 10)

    code, out, _ = prune(
        "--older-than",
        "30d",
        "--redact-older-than",
        "7d",
        WEBHOOK_REDACT_FIELDS="customer_details,email",
    )
    assert code == 0 and "redacted webhook_events=1 webhook_failures=1" in out
    for table in (LEDGER_WITH_PAYLOADS, "webhook_failures"):
        [(payload,)] = db.execute(f"SELECT payload FROM {table}").fetchall()
        obj = json.loads(payload)["data"]["object"]
        assert obj["customer_details"] == retention.REDACTED
        assert "jenny" not in payload
    # Everything else is intact, so `events show` and `reprocess` still work.
    [(payload,)] = db.execute(f"SELECT payload FROM {LEDGER_WITH_PAYLOADS}").fetchall()
    assert json.loads(payload)["id"] == checkout["id"]
    assert json.loads(payload)["data"]["object"]["amount_total"] == 3000

    code, out, _ = prune("--older-than", "30d", WEBHOOK_REDACT_FIELDS="customer_details")
    assert "redacted webhook_events=0 webhook_failures=0" in out


def test_without_configured_fields_nothing_is_redacted(prune, client, db):
    post_event(client, samples.payment_events()[0])
    age(db, 10)
    code, out, _ = prune("--older-than", "30d")
    assert code == 0 and "redacted" not in out
    [(payload,)] = db.execute(f"SELECT payload FROM {LEDGER_WITH_PAYLOADS}").fetchall()
    assert "jenny.rosen@example.com" in payload


def test_redact_walks_nested_objects_and_lists():
    payload = json.dumps({"a": [{"email": "x@y"}, {"b": {"email": "z@y", "keep": 1}}]})
    redacted = json.loads(retention.redact(payload, frozenset({"email"})))
    assert redacted == {"a": [{"email": "[redacted]"}, {"b": {"email": "[redacted]", "keep": 1}}]}


@pytest.mark.parametrize("table", sorted(retention._BY_TIME))
def test_each_batch_is_a_range_of_the_time_index_bounded_by_the_cutoff_not_a_filter(db, table):
    at, keep = retention._BY_TIME[table]
    query = psycopg.sql.SQL(retention._KEYSET_DELETE).format(
        table=psycopg.sql.Identifier(table), at=psycopg.sql.Identifier(at), keep=psycopg.sql.SQL(keep)
    )
    db.execute("SET enable_seqscan = off")
    db.execute("SET enable_bitmapscan = off")
    now = datetime.now(UTC)
    params = {"after": now - timedelta(days=60), "cutoff": now - timedelta(days=30), "batch": 10}
    plan = json.dumps(db.execute(b"EXPLAIN (FORMAT JSON) " + query.as_bytes(db), params).fetchone()[0])
    bounds = [node for node in plan.split('"Index Cond": ')[1:] if f"{at} >" in node and f"{at} <" in node]
    assert bounds, plan


def test_rows_that_share_a_time_go_in_one_batch_and_the_run_ends(db):
    then = datetime.now(UTC) - timedelta(days=40)
    times = [then] * 5 + [then + timedelta(seconds=1)]
    db.cursor().executemany(
        """INSERT INTO webhook_events (provider, event_id, event_type, status, received_at)
           VALUES ('stripe', %s, 't', 'completed', %s)""",
        [(f"evt_tie_{n}", at) for n, at in enumerate(times)],
    )
    batches = []
    deleted = retention.delete_older_than(db, then + timedelta(days=1), 2, batches.append)
    assert deleted["webhook_events"] == 6
    assert batches[:2] == [5, 1], batches


def test_a_claim_still_processing_past_the_window_stays_and_the_run_ends(prune, client, db):
    post_event(client, samples.payment_events()[1])
    db.execute(
        "INSERT INTO webhook_events (provider, event_id, event_type) VALUES ('stripe', 'evt_busy', 't')"
    )
    age(db, 40)
    code, out, _ = prune("--older-than", "30d", "--batch-size", "1")
    assert code == 0 and "webhook_events=1" in out
    [(kept,)] = db.execute("SELECT event_id FROM webhook_events").fetchall()
    assert kept == "evt_busy"


def test_every_delete_and_redaction_batch_is_followed_by_a_pause_and_none_without_one(client, db):
    for evt in [*samples.payment_events(), scripted_event(fail_attempts=9, customer_details={"n": 1})]:
        post_event(client, evt)
    age(db, 40)
    cutoff = datetime.now(UTC) - timedelta(days=30)
    slept, batches = [], []
    paced = retention.Pace(2.0, slept.append)
    fields = frozenset({"customer_details"})
    redacted = retention.redact_older_than(db, cutoff, 1, fields, batches.append, paced)
    deleted = retention.delete_older_than(db, cutoff, 1, batches.append, paced)
    assert redacted["webhook_failures"] == 1 and deleted["webhook_events"] >= 3
    # Batches of one row: one pause after each, as long as some time the batch took.
    assert len(slept) == len(batches) > sum(redacted.values()) + sum(deleted.values())
    assert all(seconds > 0 for seconds in slept), slept

    unpaced = []
    retention.delete_older_than(db, cutoff, 1, pace=retention.Pace(0, unpaced.append))
    assert unpaced == []


@pytest.mark.parametrize("pause", ["-1", "nan", "inf", "twice"])
def test_a_pause_that_is_not_a_number_of_zero_or_more_is_a_usage_error(prune, pause):
    code, out, err = prune("--older-than", "30d", "--pause", pause)
    assert code == 2 and "--pause" in err and "Traceback" not in err


@pytest.mark.parametrize("batch", ["0", "-5", "many"])
def test_a_batch_size_that_is_not_a_whole_number_of_one_or_more_is_a_usage_error_before_anything_goes(
    prune, client, db, batch
):
    post_event(client, samples.payment_events()[1])
    db.execute("UPDATE webhook_events SET received_at = now() - interval '40 days'")
    code, out, err = prune("--older-than", "30d", "--batch-size", batch)
    assert code == 2 and "--batch-size" in err and "Traceback" not in err and out == ""
    assert db.execute("SELECT count(*) FROM webhook_events").fetchone()[0] == 1
    assert out == ""


def test_the_outbox_logs_months_past_the_window_are_dropped_whole_and_the_younger_log_stays(
    prune, client, db
):
    post_event(client, samples.payment_events()[1])
    then = datetime.now(UTC) - timedelta(days=70)
    partitions.make(db, then)
    db.execute(
        "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, created)"
        " SELECT job_id, 'successful', entrypoint, priority, %s FROM pgqueuer_log",
        [then],
    )
    old = f"pgqueuer_log_p{then:%Y%m}"
    code, out, _ = prune("--older-than", "30d")
    assert code == 0
    dropped, deleted = out.splitlines()[:2]
    assert old in dropped and f"webhook_payloads_p{then:%Y%m}" in dropped
    assert "pgqueuer_log" not in deleted  # none of its rows deleted one by one
    assert db.execute("SELECT to_regclass(%s)", [old]).fetchone() == (None,)
    assert count_rows(db, "pgqueuer_log") == 1
