"""Payment-side stories (issue 10): order decisions, refund and dispute lifecycles,
subscription payments in pre-basil and basil shapes, and the state they leave.

Kept apart from stories.py's business_state: whether a payment ships depends,
by design, on whether its full refund or dispute arrived before its success.
"""

from __future__ import annotations

import itertools

from tests.support.stories import DAY, _invoice, business_state, fixture
from webhooks.traffic import samples

PRE_BASIL = "2024-06-20"
_DECISIONS = """
SELECT p.payment_id,
       CASE WHEN f.payment_id IS NOT NULL AND p.held_at IS NOT NULL THEN 'shipped_and_held'
            WHEN f.payment_id IS NOT NULL THEN 'fulfilled'
            WHEN p.held_at IS NOT NULL THEN 'held' END
FROM payments p LEFT JOIN fulfilments f USING (payment_id)
WHERE p.account = %s AND (f.payment_id IS NOT NULL OR p.held_at IS NOT NULL)
"""


def decisions(db, account: str = "") -> dict[str, str]:
    """payment id -> 'fulfilled' (order.fulfilled) or 'held' (payment.review), for decided payments."""
    return dict(db.execute(_DECISIONS, [account]).fetchall())


def jobs(db) -> list[tuple[str, str]]:
    """(kind, idempotency key) of every outbox job, sorted."""
    return sorted(db.execute("SELECT headers->>'kind', headers->>'idempotency-key' FROM pgqueuer").fetchall())


def payment_state(db, account: str = "") -> dict[str, list[tuple]]:
    """business_state without the fulfilments (see decisions)."""
    return {k: v for k, v in business_state(db, account).items() if k != "fulfilments"}


_LIFECYCLES = {
    "refund_lifecycle": "SELECT refund_id, payment_id, amount, status, failure_reason FROM refunds"
    " WHERE account = %s ORDER BY 1",
    "dispute_lifecycle": "SELECT dispute_id, payment_id, status, due_by, funds_withdrawn,"
    " funds_reinstated FROM disputes WHERE account = %s ORDER BY 1",
}


def lifecycle_state(db, account: str = "") -> dict[str, list[tuple]]:
    """payment_state plus each refund's and dispute's own status."""
    return {
        **payment_state(db, account),
        **{name: db.execute(sql, [account]).fetchall() for name, sql in _LIFECYCLES.items()},
    }


def refund(charge: dict, refund_id: str, amount: int, status: str, created: int) -> dict:
    """A Refund of `charge`, whole as Stripe renders it (https://docs.stripe.com/api/refunds/object)."""
    return {
        "id": refund_id,
        "object": "refund",
        "amount": amount,
        "charge": charge["id"],
        "created": created,
        "currency": charge["currency"],
        "payment_intent": charge["payment_intent"],
        "reason": "requested_by_customer",
        "status": status,
        "failure_reason": "expired_or_canceled_card" if status == "failed" else None,
    }


def refund_lifecycle(created: int) -> list[tuple[str, dict]]:
    """A Checkout card payment; refund 1 (1000) created then failed, in the same
    second as refund 2 (500), which succeeds. Ends 500 refunded, not in full."""
    checkout, intent, charge = samples.payment_events(3000, created=created)
    ch = charge["data"]["object"]
    at = created + DAY
    r1, r2 = samples.stripe_id("re"), samples.stripe_id("re")

    def refund_event(kind, refund_id, amount, status):
        return samples.event(kind, refund(ch, refund_id, amount, status, at), at)

    def charge_refunded(amount_refunded):
        return samples.event("charge.refunded", {**ch, "amount_refunded": amount_refunded}, at)

    return [
        ("checkout_paid", checkout),
        ("intent_succeeded", intent),
        ("r1_created", refund_event("refund.created", r1, 1000, "pending")),
        ("r1_charge", charge_refunded(1000)),
        ("r2_created", refund_event("refund.created", r2, 500, "succeeded")),
        ("r2_charge", charge_refunded(1500)),
        ("r1_failed", refund_event("refund.failed", r1, 1000, "failed")),
        ("r1_updated", refund_event("charge.refund.updated", r1, 1000, "failed")),
    ]


def dispute_lifecycle(created: int) -> list[tuple[str, dict]]:
    """A Checkout card payment disputed: created -> funds_withdrawn -> closed(won) -> funds_reinstated."""
    checkout, intent, charge = samples.payment_events(3000, created=created)
    ch = charge["data"]["object"]
    dispute_id, at = samples.stripe_id("du"), created + 2 * DAY

    def balance_transaction(amount: int) -> dict:
        return {"id": samples.stripe_id("txn"), "object": "balance_transaction", "amount": amount}

    # The Dispute object's balance_transactions: what was withdrawn and reinstated so far.
    withdrawn, reinstated = balance_transaction(-ch["amount"]), balance_transaction(ch["amount"])

    def dispute_event(kind, status, when, funds=()):
        dispute = {
            "id": dispute_id,
            "object": "dispute",
            "amount": ch["amount"],
            "charge": ch["id"],
            "created": at,
            "currency": ch["currency"],
            "payment_intent": ch["payment_intent"],
            "reason": "fraudulent",
            "status": status,
            "balance_transactions": list(funds),
            "evidence_details": {
                "due_by": at + 7 * DAY,
                "has_evidence": False,
                "past_due": False,
                "submission_count": 0,
            },
        }
        return samples.event(kind, dispute, when)

    return [
        ("checkout_paid", checkout),
        ("intent_succeeded", intent),
        ("dispute_created", dispute_event("charge.dispute.created", "needs_response", at)),
        (
            "funds_withdrawn",
            dispute_event("charge.dispute.funds_withdrawn", "needs_response", at, [withdrawn]),
        ),
        ("dispute_closed", dispute_event("charge.dispute.closed", "won", at + 20 * DAY, [withdrawn])),
        (
            "funds_reinstated",
            dispute_event("charge.dispute.funds_reinstated", "won", at + 20 * DAY, [withdrawn, reinstated]),
        ),
    ]


def subscription_payments(shape: str, start: int, renewals: int = 3) -> list[tuple[str, dict]]:
    """A Checkout subscription, then each invoice's payment_intent.succeeded and
    invoice.paid: the first invoice and `renewals` more. `shape` "pre_basil"
    links invoice and PaymentIntent both ways; "basil" links them only through
    `invoice_payment.paid`, as API 2025-03-31 and later do."""
    sub = samples.stripe_id("sub", 24)
    session = fixture("checkout.session.completed")["data"]["object"]
    session.update(
        id=samples.stripe_id("cs_test", 58),
        mode="subscription",
        payment_intent=None,
        subscription=sub,
        invoice=samples.stripe_id("in", 24),
        client_reference_id=None,
    )
    story = [("checkout", samples.event("checkout.session.completed", session, start))]
    for n in range(renewals + 1):
        story += _invoice_payment(shape, sub, n, start + n * 30 * DAY)
    return story


def _invoice_payment(shape: str, sub: str, n: int, at: int) -> list[tuple[str, dict]]:
    invoice_id, intent_id = samples.stripe_id("in", 24), samples.stripe_id("pi")
    intent = fixture("payment_intent.succeeded")["data"]["object"]
    intent.update(id=intent_id, amount=1500, amount_received=1500, metadata={}, created=at)
    paid = _invoice("invoice.paid", sub, invoice_id, at, at + 2)
    events = [
        (f"intent_{n}", samples.event("payment_intent.succeeded", intent, at + 1)),
        (f"invoice_{n}", paid),
    ]
    if shape == "pre_basil":
        invoice = paid["data"]["object"]
        del invoice["parent"]
        invoice.update(subscription=sub, payment_intent=intent_id)
        intent["invoice"] = invoice_id
        for _, evt in events:
            evt["api_version"] = PRE_BASIL
    else:
        link = invoice_payment(invoice_id, intent_id, 1500, at, paid_at=at + 1)
        events.append((f"link_{n}", samples.event("invoice_payment.paid", link, at + 2)))
    return events


def invoice_payment(invoice_id: str, intent_id: str, amount: int, created: int, paid_at: int) -> dict:
    """From basil on, what ties a paid invoice to its PaymentIntent: a paid InvoicePayment."""
    return {
        "id": samples.stripe_id("inpay"),
        "object": "invoice_payment",
        "amount_paid": amount,
        "amount_requested": amount,
        "created": created,
        "currency": "usd",
        "invoice": invoice_id,
        "is_default": True,
        "livemode": False,
        "status": "paid",
        "payment": {"type": "payment_intent", "payment_intent": intent_id},
        "status_transitions": {"canceled_at": None, "paid_at": paid_at},
    }


# Before basil, a charge's `refunds` list came with every charge up to API
# 2022-11-15, and only when expanded after it.
LISTS_REFUNDS = "2020-08-27"
CAPTURE_SHAPES = {"listed": LISTS_REFUNDS, "unlisted": PRE_BASIL}


def partial_capture(
    created: int, api_version: str = PRE_BASIL, refunds: tuple[int, ...] = ()
) -> list[tuple[str, dict]]:
    """100.00 authorised by a PaymentIntent carrying the order marker, 30.00 captured.

    Before basil the released 70.00 became a Refund made by Stripe (no reason): it
    moved the charge's amount_refunded and sent charge.refunded (Stripe's changelog,
    "Partially capturing or canceling payments no longer creates a Refund",
    https://docs.stripe.com/changelog/basil/2025-03-31/remove-refund-from-partial-capture-and-payment-cancellation-flow).
    Then each of `refunds` gives back that much of the 30.00 captured, a day apart
    (named `refund_<captured money given back so far>`, as card_payment names its
    refunds); from basil on, only those send charge.refunded. The charge lists its
    refunds on API versions before 2022-11-15.
    """
    _, intent, charge = samples.payment_events(10000, created=created)
    pi, ch = intent["data"]["object"], charge["data"]["object"]
    pi.update(amount_received=3000, capture_method="manual")
    ch.update(amount_captured=3000, captured=True)
    basil = api_version >= "2025-03-31"
    release = {**refund(ch, samples.stripe_id("re"), 7000, "succeeded", created), "reason": None}
    released, listed = (0, []) if basil else (7000, [release])
    story = [("intent_succeeded", intent)]
    if not basil:
        story.append(("charge_released", _charge_refunded(ch, released, listed, created)))
    for n, given_back in enumerate(itertools.accumulate(refunds), start=1):
        listed = [
            refund(ch, samples.stripe_id("re"), refunds[n - 1], "succeeded", created + n * DAY),
            *listed,
        ]
        story.append(
            (f"refund_{given_back}", _charge_refunded(ch, released + given_back, listed, created + n * DAY))
        )
    for _, evt in story:
        evt["api_version"] = api_version
        if api_version >= "2022-11-15":
            evt["data"]["object"].pop("refunds", None)
    return story


def _charge_refunded(charge: dict, amount_refunded: int, listed: list[dict], created: int) -> dict:
    refunded = {
        **charge,
        "amount_refunded": amount_refunded,
        "refunded": amount_refunded >= charge["amount"],
        "refunds": {"object": "list", "data": list(listed), "has_more": False},
    }
    return samples.event("charge.refunded", refunded, created)
