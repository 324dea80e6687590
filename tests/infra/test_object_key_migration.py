"""Migration 0013 folds rows the old (id, account) keys let one object have twice."""

import psycopg
import pytest

from tests.conftest import migrated_before
from tests.support.rows import count_rows
from webhooks.infra import migrate

BEFORE = "0013"


@pytest.fixture
def old_schema(server_url, tmp_path):
    """A schema migrated only up to the last migration before the re-keying."""
    with migrated_before(server_url, BEFORE, tmp_path) as url:
        yield url


_OLD_ROWS = """
INSERT INTO webhook_events (provider, event_id, event_type, account, payload)
VALUES ('stripe', 'evt_1', 'payment_intent.succeeded', '', '{}'),
       ('stripe', 'evt_1', 'payment_intent.succeeded', 'acct_self', '{}');
INSERT INTO fulfilments (payment_id, provider, account, event_id, event_type)
VALUES ('pi_1', 'stripe', '', 'evt_1', 'payment_intent.succeeded'),
       ('pi_1', 'stripe', 'acct_self', 'evt_1', 'payment_intent.succeeded');
INSERT INTO payments (payment_id, account, status, status_rank, status_at, amount)
VALUES ('pi_1', '', 'succeeded', 2, now(), 3000);
INSERT INTO payments (payment_id, account, amount_refunded, refunded, disputed)
VALUES ('pi_1', 'acct_self', 3000, true, true);
INSERT INTO refunds (refund_id, account, payment_id, amount, event_id)
VALUES ('re_1', '', 'pi_1', 3000, 'evt_2'), ('re_1', 'acct_self', 'pi_1', 3000, 'evt_3');
INSERT INTO disputes (dispute_id, account, payment_id, event_id)
VALUES ('du_1', '', 'pi_1', 'evt_4'), ('du_1', 'acct_self', 'pi_1', 'evt_5');
"""


def test_existing_rows_of_one_object_under_two_accounts_are_folded_and_recorded(old_schema):
    with psycopg.connect(old_schema, autocommit=True) as conn:
        conn.execute(_OLD_ROWS)
    assert migrate.migrate(old_schema)[0] == "0013_payment_side_object_keys"
    with psycopg.connect(old_schema, autocommit=True) as conn:

        def count(table):
            return count_rows(conn, table)

        assert [count(t) for t in ("webhook_events", "fulfilments", "payments", "refunds", "disputes")] == [
            1
        ] * 5
        payment = conn.execute(
            "SELECT account, status, amount_refunded, refunded, disputed FROM payments"
        ).fetchone()
        assert payment == ("", "succeeded", 3000, True, True)
        conflicts = conn.execute(
            "SELECT object_type, object_id, stored_account, event_account FROM scope_conflicts"
        ).fetchall()
        assert conflicts == [("payment", "pi_1", "", "acct_self")]
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO webhook_events (provider, event_id, event_type, account)"
                " VALUES ('stripe', 'evt_1', 't', 'acct_other')"
            )
