"""Which succeeded payments are one-off orders, and shipping each of them once.

A payment is an order when a Checkout Session in `payment` mode names it
(whatever invoice names it too: that is the session's post-purchase
invoice), or when its PaymentIntent carries the shop's order marker (a
metadata key, WEBHOOK_ORDER_MARKER_KEY) and it pays no invoice. Subscription
renewals, Invoicing invoices and PaymentIntents the shop did not create (Dashboard,
Terminal, other apps) succeed like any payment but are never shipped; the
outcome word says why. An invoice's PaymentIntent is recognised from
`invoice` on pre-basil PaymentIntents, from `invoice.payment_intent` on
pre-basil invoices, and from `invoice_payment.paid` (basil and later).

Both success events of a Checkout payment add what they know to the payment
row (session, client_reference_id, metadata, customer), and the first one
that finds the payment to be an order ships it: one `order.fulfilled` job
carrying everything known by then. A payment already fully refunded or
disputed when its success arrives is held instead (one `payment.review` job).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
import structlog

from webhooks.core import ledger
from webhooks.infra.db import cursor
from webhooks.core.events import Event, require_created, require_id
from . import scope
from .payments import facts_params, note

log = structlog.get_logger(__name__)

_marker_key = "order_id"


def configure(order_marker_key: str) -> None:
    """Set the metadata key that marks a PaymentIntent as an order (from Settings)."""
    global _marker_key
    _marker_key = order_marker_key


# The decision is SQL (webhooks_payment_succeeded, migrations/0024, replaced
# by 0026; why a payment is held is webhooks_hold_reason), so that
# a success event's whole delivery can be one statement; inside a handler's
# transaction it is this one.
_SUCCESS_PARAMS = "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb, %s"
_SUCCEEDED = f"""
SELECT outcome, conflicting_account
FROM webhooks_payment_succeeded(%s, %s, %s, %s, {_SUCCESS_PARAMS})
"""
_DELIVER = f"""
SELECT {ledger.CLAIM_COLUMNS}, outcome, conflicting_account
FROM webhooks_deliver_payment_succeeded(%s, %s, %s, %s, %s, %s, %s, {_SUCCESS_PARAMS})
"""


@dataclass(frozen=True)
class Success:
    """What a success event says of its payment; `order` is a handler's own decision that it is one."""

    payment_id: str
    amount: int | None
    currency: str | None
    order: bool
    facts: dict[str, Any]

    def params(self) -> list:
        return [
            self.payment_id, self.amount, self.currency, self.order, _marker_key,
            *facts_params(self.facts).values(),
        ]

    def deliver(
        self, conn: psycopg.Connection, provider: str, event: Event
    ) -> tuple[ledger.Claim, str | None]:
        """Claim, decide and complete in one statement on an autocommit connection.

        The claim, and the outcome (None when the event id was taken: the
        claim then holds the answer to replay, read in the same statement).
        """
        *claim_row, outcome, conflicting = cursor(conn).execute(
            _DELIVER, [*ledger.claim_fields(provider, event), *self.params()]
        ).fetchone()
        claim = ledger.claimed(event, claim_row)
        if claim.ledger_id is None:
            return claim, None
        return claim, _decided(event, self, outcome, conflicting)


def success(
    event: Event, payment_id: str, amount: int | None, currency: str | None, *,
    order: bool = False, **facts: Any,
) -> Success:
    require_created(event)  # the success is ordered by it
    return Success(payment_id, amount, currency, order, facts)


def succeeded(conn: psycopg.Connection, event: Event, paid: Success) -> str:
    """Record the success and ship the payment once, if it is an order and not refunded or disputed.

    Whatever the outcome, the status is recorded, so a later event (the
    session that makes it an order) finds the payment already succeeded.
    """
    row = cursor(conn).execute(
        _SUCCEEDED, [event.id, event.type, event.account_key, event.created, *paid.params()]
    ).fetchone()
    return _decided(event, paid, *row)


def _decided(event: Event, paid: Success, outcome: str, conflicting_account: str | None) -> str:
    if conflicting_account is not None:
        scope.alert(event, "payment", paid.payment_id, conflicting_account)
    return outcome


def fulfil_payment(
    conn: psycopg.Connection, event: Event, payment_id: str, amount: int | None,
    currency: str | None,
) -> str:
    """For a shop's own handler: `payment_id` succeeded and is an order; ship it once."""
    paid = success(event, require_id(payment_id, "payment id"), amount, currency, order=True)
    return succeeded(conn, event, paid)


def mark_invoice_payment(conn: psycopg.Connection, event: Event, payment_intent: str | None) -> None:
    """Record that `payment_intent` pays an invoice, so it is never shipped as an order.

    Called by the invoice events that name it (pre-basil `invoice.payment_intent`,
    basil's `invoice_payment.paid`); a no-op when they do not. A payment-mode
    Checkout Session's PaymentIntent stays an order: the invoice naming it is
    the session's post-purchase invoice (`invoice_creation`), migrations/0026.
    """
    if not payment_intent:
        return
    invoice = event.object.get("invoice") if event.object.get("object") == "invoice_payment" else None
    payment = note(conn, event, payment_intent, invoice_id=invoice or event.object.get("id"))
    if payment.checkout_mode == "payment":
        return
    shipped = conn.execute(
        "SELECT 1 FROM fulfilments WHERE payment_id = %s", [payment_intent]
    ).fetchone()
    if shipped:
        # Only possible when an invoice's PaymentIntent carried the order marker.
        log.warning("invoice_payment_already_shipped", payment_id=payment_intent,
                    event_id=event.id, account=payment.account)
