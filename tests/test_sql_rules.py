"""The words and names the SQL rule functions write are the Python side's: one vocabulary, two languages."""

import re

from webhooks import bootstrap
from webhooks.core import ingest, outbox, outcomes
from webhooks.domains.stripe import orders, payments
from webhooks.infra import migrate
from webhooks.infra.config import Settings
from webhooks.providers import stripe

SQL = "\n".join(migrate.definitions().values())


def test_every_outcome_word_the_sql_writes_is_one_a_domain_brings():
    written = set(re.findall(r"outcome := '([a-z_]+)'", SQL))
    assert {"fulfilled", "already_fulfilled", "held", "not_an_order", "invoice_payment"} <= written
    assert written <= bootstrap.handlers(Settings()).outcomes()


def test_every_job_kind_the_sql_enqueues_is_a_python_job_kind():
    kinds = {orders.ORDER_FULFILLED.name, orders.PAYMENT_REVIEW.name}
    assert set(re.findall(r"p_kind => '([a-z_.]+)'", SQL)) == kinds


def test_the_outbox_function_writes_the_entrypoint_and_headers_the_worker_reads():
    enqueue = migrate.definitions()["core/outbox.sql"]
    for word in (outbox.ENTRYPOINT, outbox.KEY_HEADER, outbox.KIND_HEADER, *outbox.EVENT_HEADERS):
        assert f"'{word}'" in enqueue


def test_the_sql_ships_under_stripes_name_and_ranks_succeeded_as_the_python_does():
    assert f"VALUES (p_payment_id, '{stripe.NAME}'," in SQL
    assert (
        f"p_status => 'succeeded',\n        p_rank => {payments._STATUS_RANK['succeeded']}::smallint" in SQL
    )


def test_the_answer_the_sql_stores_is_byte_for_byte_the_python_answer(db):
    event_id = "evt_1NXWPnJ2eZvKYlo2CvOG9cqP:fetched"  # ids are short ASCII (events.require_id)
    (stored,) = db.execute(
        "SELECT webhooks_answer_body(p_event_id => %s, p_outcome => %s)", [event_id, outcomes.FULFILLED]
    ).fetchone()
    assert stored == ingest.json_body(event_id=event_id, outcome=outcomes.FULFILLED)
