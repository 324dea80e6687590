"""Event sequences of whole business objects, as Stripe sends them, and the state they leave.

Card payments are built from `webhooks.traffic.samples`; subscriptions from the
sample files in tests/stripe_events/ with fresh ids. Every event carries a
realistic `created`, which is what orders them; delivery order is the test's.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import post_event
from webhooks.traffic import samples

FIXTURES = Path(__file__).resolve().parents[1] / "stripe_events"
DAY = 86_400


def fixture_bytes(event_type: str) -> bytes:
    return (FIXTURES / f"{event_type}.json").read_bytes()


def fixture(event_type: str) -> dict:
    return json.loads(fixture_bytes(event_type))


def scoped(evt: dict, account: str) -> dict:
    """The same event as a Connect event of `account` ('' for the platform)."""
    evt = {k: v for k, v in evt.items() if k != "account"}
    return {**evt, "account": account} if account else evt


def deliver(client, events: list[dict], account: str = "") -> list[str]:
    """Post each event once, in order; their outcomes."""
    outcomes = []
    for evt in events:
        response = post_event(client, scoped(evt, account))
        assert response.status_code == 200, (evt["type"], response.get_json())
        outcomes.append(response.get_json()["outcome"])
    return outcomes


@dataclass(frozen=True)
class CardPayment:
    """What happens to one Checkout card payment after it is created."""

    failed_first: bool = False  # a declined attempt before the card that worked
    refunds: tuple[int, ...] = ()  # cumulative amount_refunded after each refund
    disputed: bool = False
    fraud_warned: bool = False  # a Radar early fraud warning on its charge
    amount: int = 3000


def card_payment(shape: CardPayment, created: int) -> list[tuple[str, dict]]:
    """(name, event) pairs for one payment, in the order Stripe creates them."""
    checkout, intent, charge = samples.payment_events(shape.amount, created=created)
    checkout["created"] = created + 1  # the session completes after its charge
    story = []
    if shape.failed_first:
        story.append(("intent_failed", _failed_attempt(intent["data"]["object"], created - 30)))
    story += [("intent_succeeded", intent), ("charge_succeeded", charge), ("checkout_paid", checkout)]
    for n, refunded in enumerate(shape.refunds, start=1):
        story.append((f"refund_{refunded}", _refund(charge["data"]["object"], refunded, created + n * DAY)))
    if shape.fraud_warned:
        story.append(("fraud_warning", fraud_warning(charge["data"]["object"], created + 5 * DAY)))
    if shape.disputed:
        story.append(("dispute", _dispute(charge["data"]["object"], created + 10 * DAY)))
    return story


def _failed_attempt(intent: dict, created: int) -> dict:
    failed = {
        **intent,
        "status": "requires_payment_method",
        "amount_received": 0,
        "latest_charge": samples.stripe_id("ch"),
        "last_payment_error": {"code": "card_declined", "decline_code": "generic_decline"},
    }
    return samples.event("payment_intent.payment_failed", failed, created)


def _refund(charge: dict, amount_refunded: int, created: int) -> dict:
    refunded = {**charge, "amount_refunded": amount_refunded, "refunded": amount_refunded >= charge["amount"]}
    return samples.event("charge.refunded", refunded, created)


def _dispute(charge: dict, created: int) -> dict:
    dispute = {
        "id": samples.stripe_id("du"),
        "object": "dispute",
        "amount": charge["amount"],
        "charge": charge["id"],
        "currency": charge["currency"],
        "payment_intent": charge["payment_intent"],
        "reason": "fraudulent",
        "status": "needs_response",
    }
    return samples.event("charge.dispute.created", dispute, created)


def fraud_warning(
    charge: dict, created: int, event_type: str = "radar.early_fraud_warning.created", **fields
) -> dict:
    """The shape of The Early Fraud Warning object (https://docs.stripe.com/api/early_fraud_warnings/object)."""
    warning = {
        "id": samples.stripe_id("issfr"),
        "object": "radar.early_fraud_warning",
        "actionable": True,
        "charge": charge["id"],
        "created": created,
        "fraud_type": "made_with_stolen_card",
        "livemode": False,
        "payment_intent": charge["payment_intent"],
        **fields,
    }
    return samples.event(event_type, warning, created)


def async_payment(succeeds: bool, created: int) -> list[tuple[str, dict]]:
    """A SEPA Checkout payment: the session completes unpaid, is paid (or fails) days later."""
    session = fixture("checkout.session.completed")["data"]["object"]
    session.update(id=samples.stripe_id("cs_test", 58), payment_intent=samples.stripe_id("pi"))
    unpaid = samples.event("checkout.session.completed", {**session, "payment_status": "unpaid"}, created)
    result_type = "succeeded" if succeeds else "failed"
    result = samples.event(
        f"checkout.session.async_payment_{result_type}",
        {**session, "payment_status": "paid" if succeeds else "unpaid"},
        created + 4 * DAY,
    )
    return [("checkout_unpaid", unpaid), (f"async_{result_type}", result)]


def subscription(start: int) -> list[tuple[str, dict]]:
    """Monthly subscription: first invoice paid, renewal fails then is paid on retry,
    the subscription is deleted, and its final invoice is paid after the deletion."""
    sub = samples.stripe_id("sub", 24)
    month = 30 * DAY
    renewal = samples.stripe_id("in", 24)
    deleted = fixture("customer.subscription.deleted")
    deleted.update(id=samples.stripe_id("evt"), created=start + 2 * month)
    deleted["data"]["object"]["id"] = sub
    return [
        ("first_paid", _invoice("invoice.paid", sub, samples.stripe_id("in", 24), start, start + 2)),
        (
            "renewal_failed",
            _invoice("invoice.payment_failed", sub, renewal, start + month, start + month + 4),
        ),
        ("renewal_paid", _invoice("invoice.paid", sub, renewal, start + month, start + month + 3 * DAY)),
        ("deleted", deleted),
        (
            "final_paid",
            _invoice(
                "invoice.paid", sub, samples.stripe_id("in", 24), start + 2 * month, start + 2 * month + 60
            ),
        ),
    ]


def _invoice(event_type: str, sub: str, invoice_id: str, period_start: int, created: int) -> dict:
    evt = fixture(event_type)
    evt.update(id=samples.stripe_id("evt"), created=created)
    invoice = evt["data"]["object"]
    invoice.update(id=invoice_id, created=period_start)
    invoice["parent"]["subscription_details"]["subscription"] = sub
    line = copy.deepcopy(invoice["lines"]["data"][0])
    line.update(invoice=invoice_id, period={"start": period_start, "end": period_start + 30 * DAY})
    line["parent"]["subscription_item_details"]["subscription"] = sub
    invoice["lines"]["data"] = [line]
    return evt


_STATE_QUERIES = {
    "payments": "SELECT payment_id, status, status_at, amount, currency, amount_refunded, refunded,"
    " refund_at, disputed, fraud_warned FROM payments WHERE account = %s ORDER BY 1",
    "fulfilments": "SELECT payment_id, amount, currency FROM fulfilments WHERE account = %s ORDER BY 1",
    "refunds": "SELECT refund_id, payment_id, amount FROM refunds WHERE account = %s ORDER BY 1",
    "disputes": "SELECT dispute_id, payment_id, amount, reason FROM disputes WHERE account = %s ORDER BY 1",
    "invoices": "SELECT invoice_id, subscription_id, status, status_at, amount_paid FROM invoices"
    " WHERE account = %s ORDER BY 1",
    "invoice_fulfilments": "SELECT invoice_id, subscription_id, amount_paid, period_start, period_end"
    " FROM invoice_fulfilments WHERE account = %s ORDER BY 1",
    "subscriptions": "SELECT subscription_id, paid_through, revoked_at, revoked_reason"
    " FROM subscriptions WHERE account = %s ORDER BY 1",
}


def business_state(db, account: str = "") -> dict[str, list[tuple]]:
    """Everything the shop acts on for one account, without ids of the events that set it."""
    return {table: db.execute(sql, [account]).fetchall() for table, sql in _STATE_QUERIES.items()}
