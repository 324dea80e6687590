"""Radar early fraud warnings hold an order not yet shipped and are told once after (issue 24).

Stripe, The Early Fraud Warning object (https://docs.stripe.com/api/early_fraud_warnings/object):
"An EFW is actionable if it has not received a dispute and has not been fully
refunded. You may wish to proactively refund a charge that receives an EFW, in
order to avoid receiving a dispute later." Events: radar.early_fraud_warning.created
and .updated, carrying the whole warning (charge, payment_intent, fraud_type,
actionable). Before, both were `ignored`: a warned payment shipped, and the shop
never heard of the warning.
"""

from functools import partial

import pytest

from tests.conftest import post_event, until_answered
from tests.domains.stripe.test_orders import NOW, _payloads
from tests.support.payment_stories import PRE_BASIL, decisions, jobs
from tests.support.stories import CardPayment, card_payment, deliver, fraud_warning
from tests.support.storm import release_together

SHAPES = {"pre_basil": PRE_BASIL, "basil": "2025-03-31.basil"}
KINDS = ["radar.early_fraud_warning.created", "radar.early_fraud_warning.updated"]


def _story(shape: str, kind: str = KINDS[0], **fields) -> dict:
    story = dict(card_payment(CardPayment(), NOW))
    story["fraud_warning"] = fraud_warning(
        story["charge_succeeded"]["data"]["object"], NOW + 3600, kind, **fields
    )
    for evt in story.values():
        evt["api_version"] = SHAPES[shape]
    return story


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_an_early_fraud_warning_before_the_success_holds_the_order_once(app, db, shape, kind):
    story = _story(shape, kind)
    assert until_answered(app, story["fraud_warning"]) == "fraud_warning_recorded"
    successes = [story["checkout_paid"], story["intent_succeeded"]] * 4  # both, duplicated
    results = release_together([partial(post_event, app.test_client(), e) for e in successes])
    assert {r.status for r in results} <= {200, 409}
    assert {until_answered(app, e) for e in successes} == {"held"}
    payment_id = story["intent_succeeded"]["data"]["object"]["id"]
    assert decisions(db) == {payment_id: "held"}
    assert jobs(db) == [("payment.review", f"payment.review:{payment_id}")]
    [review] = _payloads(db, "payment.review")
    assert review["reason"] == "fraud_warning"


@pytest.mark.parametrize("shape", SHAPES)
def test_an_early_fraud_warning_after_shipping_queues_one_job_with_the_charge_and_fraud_type(app, db, shape):
    story = _story(shape)
    assert deliver(app.test_client(), [story["intent_succeeded"]]) == ["fulfilled"]
    warning = story["fraud_warning"]
    results = release_together([partial(post_event, app.test_client(), warning) for _ in range(8)])
    assert {r.status for r in results} <= {200, 409}
    assert until_answered(app, warning) == "fraud_warning_reported"
    payment_id, charge = warning["data"]["object"]["payment_intent"], warning["data"]["object"]["charge"]
    assert decisions(db) == {payment_id: "fulfilled"}
    [job] = _payloads(db, "payment.fraud_warning")
    assert (job["payment_id"], job["charge"], job["fraud_type"], job["actionable"], job["warning_id"]) == (
        payment_id,
        charge,
        "made_with_stolen_card",
        True,
        warning["data"]["object"]["id"],
    )
    # The checkout's success arriving later changes nothing either.
    assert deliver(app.test_client(), [story["checkout_paid"]]) == ["already_fulfilled"]
    assert sorted(kind for kind, _ in jobs(db)) == ["order.fulfilled", "payment.fraud_warning"]


def test_an_update_tells_nothing_more_and_a_stale_one_never_makes_a_warning_actionable_again(client, db):
    story = _story("basil")
    created = story["fraud_warning"]
    refunded = {**created["data"]["object"], "actionable": False}  # the shop refunded it
    updated = {
        **created,
        "id": "evt_updated",
        "type": KINDS[1],
        "created": NOW + 7200,
        "data": {"object": refunded},
    }
    stale = {**created, "id": "evt_stale", "type": KINDS[1]}
    outcomes = deliver(client, [story["intent_succeeded"], created, updated, stale])
    assert outcomes == [
        "fulfilled",
        "fraud_warning_reported",
        "fraud_warning_updated",
        "fraud_warning_updated",
    ]
    assert db.execute("SELECT actionable FROM fraud_warnings").fetchall() == [(False,)]
    assert len(_payloads(db, "payment.fraud_warning")) == 1
