"""Refund and dispute lifecycles: keyed by their own ids, final states never regress,
one outbox job per transition. (Shuffled and concurrent: test_delivery_property.py.)"""

import json
import time

from tests.support.payment_stories import (
    decisions,
    dispute_lifecycle,
    jobs,
    lifecycle_state,
    refund_lifecycle,
)
from tests.support.stories import deliver
from webhooks.traffic import samples

NOW = int(time.time())


def _payload(db, key: str) -> dict:
    row = db.execute(
        "SELECT convert_from(payload, 'UTF8') FROM pgqueuer WHERE headers->>'idempotency-key' = %s",
        [key],
    ).fetchone()
    return json.loads(row[0])


def _payment(db) -> tuple:
    return db.execute("SELECT amount_refunded, refunded, disputed FROM payments").fetchone()


def test_a_refund_that_fails_is_subtracted_and_reported(client, db):
    story = dict(refund_lifecycle(NOW))
    r1 = story["r1_created"]["data"]["object"]["id"]
    outcomes = deliver(
        client,
        [
            story["intent_succeeded"],
            story["r1_created"],
            story["r1_charge"],
            story["r1_failed"],
            story["r1_updated"],
        ],
    )
    assert outcomes == [
        "fulfilled",
        "partially_refunded",
        "partially_refunded",
        "refund_failed",
        "superseded",
    ]
    assert _payment(db) == (0, False, False)
    assert [key for kind, key in jobs(db) if kind != "order.fulfilled"] == [
        f"payment.refunded:{r1}",
        f"refund.failed:{r1}",
    ]
    failed = _payload(db, f"refund.failed:{r1}")
    assert (failed["status"], failed["failure_reason"]) == ("failed", "expired_or_canceled_card")


def test_a_failed_refund_never_returns_to_pending_or_succeeded(client, db):
    story = dict(refund_lifecycle(NOW))
    assert deliver(client, [story["r1_failed"], story["r1_created"]]) == ["refund_failed", "superseded"]
    assert db.execute("SELECT status FROM refunds").fetchall() == [("failed",)]
    r1 = story["r1_created"]["data"]["object"]["id"]
    assert [key for _, key in jobs(db)] == [f"refund.failed:{r1}"]


def test_refunds_in_the_same_second_end_with_the_live_ones_counted_once(client, db):
    story = refund_lifecycle(NOW)
    deliver(client, [evt for _, evt in story])
    state = lifecycle_state(db)
    by_amount = {r[2]: r[3] for r in state["refund_lifecycle"]}
    assert by_amount == {1000: "failed", 500: "succeeded"}
    assert _payment(db) == (500, False, False)


def test_an_old_api_charge_lists_its_refunds_and_a_later_refund_event_does_not_count_twice(client, db):
    checkout, intent, charge = samples.payment_events(3000, created=NOW)
    ch = charge["data"]["object"]
    refund = {
        "id": samples.stripe_id("re"),
        "object": "refund",
        "amount": 3000,
        "charge": ch["id"],
        "currency": "usd",
        "created": NOW + 5,
        "status": "succeeded",
    }
    listed = samples.event(
        "charge.refunded",
        {**ch, "amount_refunded": 3000, "refunded": True, "refunds": {"object": "list", "data": [refund]}},
        NOW + 5,
        api_version="2022-08-01",
    )
    updated = samples.event("refund.updated", {**refund, "payment_intent": ch["payment_intent"]}, NOW + 6)
    assert deliver(client, [intent, listed, updated]) == ["fulfilled", "refunded", "superseded"]
    assert db.execute("SELECT refund_id, amount, status FROM refunds").fetchall() == [
        (refund["id"], 3000, "succeeded")
    ]
    assert _payment(db) == (3000, True, False)
    assert [kind for kind, _ in jobs(db)] == ["order.fulfilled", "payment.refunded"]


def test_a_won_dispute_follows_its_lifecycle_and_clears_the_flag(client, db):
    story = dict(dispute_lifecycle(NOW))
    dispute = story["dispute_created"]["data"]["object"]
    outcomes = deliver(
        client,
        [
            story[n]
            for n in (
                "intent_succeeded",
                "dispute_created",
                "funds_withdrawn",
                "dispute_closed",
                "funds_reinstated",
            )
        ],
    )
    assert outcomes == ["fulfilled", "dispute_open", "dispute_open", "dispute_won", "dispute_won"]
    [row] = lifecycle_state(db)["dispute_lifecycle"]
    assert (row[2], row[3].timestamp(), row[4], row[5]) == (
        "won",
        dispute["evidence_details"]["due_by"],
        True,
        True,
    )
    assert _payment(db)[2] is False
    opened = _payload(db, f"dispute.opened:{dispute['id']}")
    assert (opened["due_by"], opened["status"]) == (dispute["evidence_details"]["due_by"], "needs_response")
    assert _payload(db, f"dispute.closed:{dispute['id']}")["status"] == "won"


def test_a_closed_dispute_never_reopens_and_a_lost_one_keeps_the_payment_flagged(client, db):
    story = dict(dispute_lifecycle(NOW))
    lost = json.loads(json.dumps(story["dispute_closed"]))
    lost["data"]["object"]["status"] = "lost"
    under_review = json.loads(json.dumps(story["dispute_created"]))
    under_review.update(id=samples.stripe_id("evt"), type="charge.dispute.updated")
    under_review["data"]["object"]["status"] = "under_review"
    assert deliver(client, [lost, under_review, story["dispute_created"]]) == [
        "dispute_lost",
        "superseded",
        "superseded",
    ]
    assert lifecycle_state(db)["dispute_lifecycle"][0][2] == "lost"
    assert _payment(db)[2] is True
    assert sorted(kind for kind, _ in jobs(db)) == ["dispute.closed", "dispute.opened"]


def test_an_inquiry_closed_without_a_chargeback_ends_warning_closed(client, db):
    story = dict(dispute_lifecycle(NOW))
    events = []
    for n, status in enumerate(["warning_needs_response", "warning_closed"]):
        evt = json.loads(json.dumps(story["dispute_created"]))
        evt.update(
            id=samples.stripe_id("evt"),
            created=NOW + n,
            type="charge.dispute.created" if n == 0 else "charge.dispute.closed",
        )
        evt["data"]["object"]["status"] = status
        events.append(evt)
    assert deliver(client, events) == ["dispute_open", "dispute_closed"]
    assert _payment(db)[2] is False
    assert decisions(db) == {}


def test_a_refund_seen_under_a_second_scope_is_recorded_and_applied_once(client, db):
    story = dict(refund_lifecycle(NOW))
    r1 = story["r1_created"]["data"]["object"]["id"]
    assert deliver(client, [story["r1_created"]], "acct_1Seller") == ["partially_refunded"]
    assert deliver(client, [{**story["r1_failed"], "context": "acct_1Platform"}]) == ["refund_failed"]
    assert db.execute("SELECT account, status FROM refunds").fetchall() == [("acct_1Seller", "failed")]
    conflicts = db.execute("SELECT object_type, object_id FROM scope_conflicts ORDER BY 1").fetchall()
    payment_id = story["intent_succeeded"]["data"]["object"]["id"]
    assert conflicts == [("payment", payment_id), ("refund", r1)]
    assert _payment(db)[0] == 0
