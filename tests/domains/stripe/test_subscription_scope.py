"""Invoices and subscriptions are keyed by object id; the Connect account is a checked attribute.

Also: migration 0016 turns rows an older version keyed by (id, account)
into one row per object, keeping the first account and recording the rest.
"""

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.conftest import migrated_before
from tests.support.rows import count_rows
from tests.support.stories import deliver
from tests.support.subscription_stories import Story, access_at, dunning, renewal
from webhooks.infra import migrate

START = 1_780_000_000


def _conflicts(db):
    return db.execute(
        "SELECT object_type, object_id, stored_account, event_account FROM scope_conflicts ORDER BY 1"
    ).fetchall()


def test_a_deletion_under_another_scope_still_revokes_the_one_row_and_is_recorded(client, db):
    story = Story(START)
    events = dunning(story, "cancel")
    activated, deleted = events[2][1], events[-1][1]
    deliver(client, [activated], "acct_platform")
    # An organisation destination puts `context` on the platform's own events.
    deliver(client, [{**deleted, "context": "acct_org_self"}])
    rows = db.execute("SELECT subscription_id, account, status FROM subscriptions").fetchall()
    assert rows == [(story.sub, "acct_platform", "canceled")]
    assert access_at(db, story.sub, START + 3 * 30 * 86_400)[0] is False
    assert _conflicts(db) == [("subscription", story.sub, "acct_platform", "acct_org_self")]


def test_an_invoice_paid_seen_under_two_scopes_is_fulfilled_once(client, db):
    story = Story(START)
    paid = renewal(story)[1][1]
    again = {**paid, "id": paid["id"] + "b"}  # a second destination's copy
    assert deliver(client, [paid]) == ["fulfilled"]
    assert deliver(client, [again], "acct_org_self") == ["already_fulfilled"]
    assert count_rows(db, "invoice_fulfilments") == 1
    assert _conflicts(db) == [
        ("invoice", paid["data"]["object"]["id"], "", "acct_org_self"),
        ("subscription", story.sub, "", "acct_org_self"),
    ]


@pytest.fixture
def schema_before_0016(server_url, tmp_path):
    """A schema migrated up to 0015: invoices and subscriptions keyed by id and account."""
    with migrated_before(server_url, "0016", tmp_path) as url:
        yield url


def test_migration_0016_merges_rows_of_one_object_under_two_accounts(schema_before_0016):
    t0 = datetime(2026, 5, 1, tzinfo=UTC)
    day = timedelta(days=1)
    with psycopg.connect(schema_before_0016, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO invoices (invoice_id, account, subscription_id, status, status_rank, status_at)"
            " VALUES ('in_1', 'acct_self', NULL, 'payment_failed', 0, %s),"
            " ('in_1', '', 'sub_1', 'paid', 1, %s)",
            [t0, t0 + day],
        )
        conn.execute(
            "INSERT INTO invoice_fulfilments (invoice_id, account, subscription_id, event_id)"
            " VALUES ('in_1', '', 'sub_1', 'evt_a'), ('in_1', 'acct_self', 'sub_1', 'evt_b')"
        )
        conn.execute(
            "INSERT INTO subscriptions (subscription_id, account, paid_through, updated_at)"
            " VALUES ('sub_1', '', %s, %s)",
            [t0 + 30 * day, t0],
        )
        conn.execute(
            "INSERT INTO subscriptions"
            " (subscription_id, account, paid_through, revoked_at, revoked_reason, updated_at)"
            " VALUES ('sub_1', 'acct_self', %s, %s, 'payment_failed', %s)",
            [t0 + 20 * day, t0 + 40 * day, t0 + day],
        )
        migrate.migrate(schema_before_0016)
        invoices = conn.execute("SELECT invoice_id, account, subscription_id, status FROM invoices")
        assert invoices.fetchall() == [("in_1", "acct_self", "sub_1", "paid")]
        assert conn.execute("SELECT event_id FROM invoice_fulfilments").fetchall() == [("evt_a",)]
        assert conn.execute(
            "SELECT account, paid_through, revoked_at, revoked_reason, status FROM subscriptions"
        ).fetchall() == [("", t0 + 30 * day, t0 + 40 * day, "payment_failed", "canceled")]
        assert _conflicts(conn) == [
            ("invoice", "in_1", "acct_self", ""),
            ("subscription", "sub_1", "", "acct_self"),
        ]
        assert conn.execute(
            "SELECT has_access, reason FROM subscription_access WHERE subscription_id = 'sub_1'"
        ).fetchone() == (False, "canceled")
