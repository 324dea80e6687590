"""Money refunded is what was captured and then given back (issue 24).

Before API 2025-03-31 (basil) a partial capture or a cancelled authorisation
created a Refund for the released part: it moved the charge's amount_refunded
and sent charge.refunded. Stripe's changelog, "Partially capturing or canceling
payments no longer creates a Refund"
(https://docs.stripe.com/changelog/basil/2025-03-31/remove-refund-from-partial-capture-and-payment-cancellation-flow):
from basil on, no Refund, `amount_refunded` not updated by these actions,
`amount_captured` 0 (not null) and `refunded` not true on a cancellation, and no
charge.refunded. Counted as a refund, the released 70.00 of a 30.00 capture held
the paid order, or told the shop it was refunded in full.
"""

from functools import partial

import pytest

from tests.conftest import post_event, until_answered
from tests.domains.stripe.test_orders import NOW, _payloads
from tests.support.payment_stories import CAPTURE_SHAPES, decisions, jobs, partial_capture
from tests.support.stories import deliver
from tests.support.storm import release_together
from webhooks.traffic import samples

SHAPES = {**CAPTURE_SHAPES, "basil": "2025-03-31.basil"}


def _payment(db, payment_id: str) -> tuple:
    return db.execute(
        "SELECT amount_captured, amount_refunded, refunded FROM payments WHERE payment_id = %s",
        [payment_id],
    ).fetchone()


@pytest.mark.parametrize("shape", CAPTURE_SHAPES)
def test_a_partial_capture_whose_release_arrives_first_ships_once_and_no_job_reports_it_refunded(
    app, db, shape
):
    story = dict(partial_capture(NOW, CAPTURE_SHAPES[shape]))
    assert until_answered(app, story["charge_released"]) == "authorization_released"
    success = story["intent_succeeded"]
    results = release_together([partial(post_event, app.test_client(), success) for _ in range(8)])
    assert {r.status for r in results} <= {200, 409}
    assert until_answered(app, success) == "fulfilled"  # the stored answer
    payment_id = success["data"]["object"]["id"]
    assert decisions(db) == {payment_id: "fulfilled"}
    assert jobs(db) == [("order.fulfilled", f"order.fulfilled:{payment_id}")]
    assert _payment(db, payment_id) == (3000, 0, False)


@pytest.mark.parametrize("shape", CAPTURE_SHAPES)
def test_a_release_after_shipping_is_recorded_as_released_not_as_a_full_refund(client, db, shape):
    story = dict(partial_capture(NOW, CAPTURE_SHAPES[shape]))
    assert deliver(client, [story["intent_succeeded"], story["charge_released"]]) == [
        "fulfilled",
        "authorization_released",
    ]
    payment_id = story["intent_succeeded"]["data"]["object"]["id"]
    assert [kind for kind, _ in jobs(db)] == ["order.fulfilled"]
    assert _payment(db, payment_id) == (3000, 0, False)


@pytest.mark.parametrize("shape", SHAPES)
def test_refunds_of_the_captured_part_are_measured_against_what_was_captured(client, db, shape):
    story = partial_capture(NOW, SHAPES[shape], refunds=(1000, 2000))
    outcomes = dict(zip((name for name, _ in story), deliver(client, [evt for _, evt in story]), strict=True))
    assert (outcomes["refund_1000"], outcomes["refund_3000"]) == ("partially_refunded", "refunded")
    payment_id = story[0][1]["data"]["object"]["id"]
    assert _payment(db, payment_id) == (3000, 3000, True)
    told = sorted(
        (j["amount"], j["payment_amount_refunded"], j["payment_fully_refunded"])
        for j in _payloads(db, "payment.refunded")
    )
    # Only a charge that lists its refunds (before 2022-11-15) names them one by one.
    assert told == ([(1000, 1000, False), (2000, 3000, True)] if shape == "listed" else [])


@pytest.mark.parametrize("shape", CAPTURE_SHAPES)
@pytest.mark.parametrize("order", ["refund_first", "success_first"])
def test_a_partial_capture_refunded_in_full_before_its_success_is_held_after_it_reported(
    client, db, shape, order
):
    story = dict(partial_capture(NOW, CAPTURE_SHAPES[shape], refunds=(3000,)))
    events = [story["charge_released"], story["refund_3000"]]
    success = story["intent_succeeded"]
    outcomes = deliver(client, [*events, success] if order == "refund_first" else [success, *events])
    payment_id = success["data"]["object"]["id"]
    assert decisions(db) == {payment_id: "held" if order == "refund_first" else "fulfilled"}
    assert outcomes[1 if order == "refund_first" else 2] == "refunded"
    assert _payment(db, payment_id) == (3000, 3000, True)


@pytest.mark.parametrize("reason", [None, "expired_uncaptured_charge"])
def test_a_cancelled_authorisation_is_released_not_fully_refunded(client, db, reason):
    """Before basil a cancelled (or expired) authorisation's charge was `refunded`, its
    amount_refunded the whole amount and amount_captured null, with a Refund of it all."""
    _, intent, charge = samples.payment_events(10000, created=NOW)
    ch = charge["data"]["object"]
    release = {
        "id": samples.stripe_id("re"),
        "object": "refund",
        "amount": 10000,
        "charge": ch["id"],
        "created": NOW,
        "currency": "usd",
        "payment_intent": ch["payment_intent"],
        "reason": reason,
        "status": "succeeded",
    }
    ch.update(
        captured=False,
        amount_captured=None,
        amount_refunded=10000,
        refunded=True,
        refunds={"object": "list", "data": [release], "has_more": False},
    )
    cancelled = samples.event("charge.refunded", ch, NOW, api_version="2020-08-27")
    assert deliver(client, [cancelled]) == ["authorization_released"]
    assert jobs(db) == [] and decisions(db) == {}
    assert _payment(db, ch["payment_intent"]) == (0, 0, False)
