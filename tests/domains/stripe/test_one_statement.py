"""A payment's success delivered as one statement: the same transaction, the same answer."""

import json
import time

import pytest

from bench import pgbench
from tests.conftest import post_event
from tests.support.rows import count_rows
from tests.support.stories import CardPayment, card_payment, deliver
from webhooks.traffic import samples

NOW = int(time.time())


@pytest.fixture
def statements():
    """Every (cursor, query, params) psycopg executes while the test runs (as the bench records them)."""
    with pgbench.captured() as calls:
        yield calls


def _sent(calls) -> list[str]:
    """The statements' texts, without the empty query of the pool's liveness check: a
    connection not used for a while gets it at checkout, outside any delivery."""
    return [str(query).strip() for _, query, _ in calls if str(query).strip()]


@pytest.mark.parametrize("index", [0, 1], ids=["session", "intent"])
def test_a_payment_success_is_claimed_fulfilled_and_completed_by_one_statement(client, db, statements, index):
    warm_up, evt = samples.payment_events()[2], samples.payment_events()[index]
    post_event(client, warm_up)  # opens the pool and checks the schema
    statements.clear()
    response = post_event(client, evt)
    assert response.get_json()["outcome"] == "fulfilled"
    [sent] = _sent(statements)
    assert "webhooks_deliver_payment_succeeded" in sent
    stored = db.execute(
        "SELECT status, response_status, response_body FROM webhook_events WHERE event_id = %s",
        [evt["id"]],
    ).fetchone()
    # Written by SQL, answered by Python: a replay must be byte-identical to the first answer.
    assert stored == ("completed", 200, response.get_data(as_text=True))
    counts = db.execute(
        "SELECT (SELECT count(*) FROM fulfilments), (SELECT count(*) FROM pgqueuer)"
    ).fetchone()
    assert counts == (1, 1)


@pytest.mark.parametrize("index", [1, 2], ids=["one-statement", "settled"])
def test_a_redelivery_is_answered_by_its_claim_statement_byte_for_byte(client, statements, index):
    evt = samples.payment_events()[index]
    first = post_event(client, evt)
    statements.clear()
    again = post_event(client, evt)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_data() == first.get_data()
    assert len(_sent(statements)) == 1


SUCCESS_TYPES = (
    "payment_intent.succeeded",
    "checkout.session.completed",
    "checkout.session.async_payment_succeeded",
)


def _registry(app):
    return app.extensions["webhooks.service"].registry


def test_a_handler_registered_for_a_success_type_replaces_the_one_statement_delivery(
    app, client, db, statements
):
    _registry(app).add("stripe", ["payment_intent.succeeded"], lambda conn, event: "shop_handled")
    response = post_event(client, samples.payment_events()[1])
    assert response.get_json()["outcome"] == "shop_handled"
    assert not any("webhooks_deliver_payment_succeeded" in text for text in _sent(statements))
    assert count_rows(db, "fulfilments") == 0


def _job_payloads(db, payment_id: str) -> list[dict]:
    rows = db.execute(
        "SELECT convert_from(payload, 'UTF8')::jsonb FROM pgqueuer WHERE headers->>'idempotency-key' LIKE %s",
        [f"%:{payment_id}"],
    ).fetchall()
    return [row[0] for row in rows]


def _run_story(client, db, shape: CardPayment, reverse: bool) -> tuple[list[str], list[dict]]:
    """Outcomes and the payment's jobs, ids replaced by their role so two runs compare."""
    story = card_payment(shape, NOW)
    events = [evt for _, evt in (reversed(story) if reverse else story)]
    outcomes = deliver(client, events)
    intent = next(evt for name, evt in story if name == "intent_succeeded")["data"]["object"]
    checkout = next(evt for name, evt in story if name == "checkout_paid")["data"]["object"]
    ids = {evt["id"]: name for name, evt in story}
    roles = {
        **ids,
        intent["id"]: "payment",
        checkout["id"]: "session",
        checkout["client_reference_id"]: "reference",
        intent["customer"]: "customer",
    }
    payloads = json.loads(json.dumps(_job_payloads(db, intent["id"]), sort_keys=True))
    for payload in payloads:
        for key, value in payload.items():
            payload[key] = roles.get(value, value) if isinstance(value, str) else value
        payload["metadata"] = {k: roles.get(v, v) for k, v in payload["metadata"].items()}
    return outcomes, payloads


@pytest.mark.parametrize("reverse", [False, True], ids=["in order", "reversed"])
@pytest.mark.parametrize(
    "shape",
    [
        CardPayment(),
        CardPayment(failed_first=True),
        CardPayment(refunds=(3000,)),
        CardPayment(refunds=(1000,), disputed=True),
    ],
    ids=["plain", "failed first", "refunded", "disputed"],
)
def test_the_one_statement_and_the_transaction_decide_a_payment_alike(app, client, db, shape, reverse):
    one_statement = _run_story(client, db, shape, reverse)
    # The same built-in handlers, added again without their one-statement form.
    registry = _registry(app)
    for event_type in SUCCESS_TYPES:
        registry.add("stripe", [event_type], registry.handler("stripe", event_type))
    in_transaction = _run_story(client, db, shape, reverse)
    assert one_statement == in_transaction
    assert one_statement[1], "every shape here ships or holds the payment"
