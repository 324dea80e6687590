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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
import structlog
from pydantic import ConfigDict, Field

from webhooks.core import jobs, ledger
from webhooks.core.events import Event, require_created, require_id
from webhooks.core.outcomes import FULFILLED, HELD
from webhooks.core.parts import Parts
from webhooks.infra.db import cursor, one, storable

from . import line_items, scope
from .line_items import LineItem
from .payments import facts_params, note

log = structlog.get_logger(__name__)


class _Order(jobs.Job):
    """What an order's job says of its payment, shipped or held."""

    payment_id: str
    """the PaymentIntent id (a Charges-API payment's charge id, or a session without a PaymentIntent's own
    id)"""
    account: str | None
    """the Connect account (`acct_...`) the object belongs to; null for the platform's own"""
    event_id: str
    """the event whose delivery enqueued the job"""
    event_type: str
    """that event's type"""
    amount: jobs.Amount
    """in the currency's smallest unit"""
    currency: jobs.Currency | None
    """ISO currency code, lower case; null for a free Checkout Session that names none"""
    session_id: str | None
    """the Checkout Session, when one named the payment by then"""
    client_reference_id: str | None
    """the session's `client_reference_id`"""
    customer: str | None
    """the Stripe customer id"""
    metadata: dict[str, str]
    """the PaymentIntent's metadata, overlaid by the session's"""


class OrderFulfilledJob(_Order):
    """Enqueued once per payment that is an order, when its success arrives and nothing holds it
    (docs/events.md, Which payments ship). Key: `order.fulfilled:<payment_id>`."""

    model_config = ConfigDict(title="An order to ship")

    kind: Literal["order.fulfilled"]
    line_items: list[LineItem] = Field(default_factory=list)
    """what the order bought, for a Checkout Session's order: its line items, in Stripe's order. Absent
    when the order has no session, and while STRIPE_API_KEY is unset (docs/outbox.md, Line items)"""


class PaymentReviewJob(_Order):
    """Enqueued instead of `order.fulfilled` when the payment was already refunded in full, disputed or
    given an early fraud warning when its success arrived. Key: `payment.review:<payment_id>`."""

    model_config = ConfigDict(title="An order held for a person to decide")

    kind: Literal["payment.review"]
    reason: Literal["disputed", "refunded", "fraud_warning"]
    """why it is held"""


# The job kinds the decision writes (orders.sql).
ORDER_FULFILLED = jobs.documented(OrderFulfilledJob, complete=line_items.complete)
PAYMENT_REVIEW = jobs.documented(PaymentReviewJob)
# Why a payment that succeeded is not shipped, besides `held` (refunded,
# disputed or fraud-warned before its success: payment.review).
INVOICE_PAYMENT = "invoice_payment"  # pays an invoice (subscription, Invoicing)
NOT_AN_ORDER = "not_an_order"  # no Checkout Session in payment mode, no order marker
SUBSCRIPTION_CHECKOUT = "subscription_checkout"  # its invoices are the billing side's
SETUP_CHECKOUT = "setup_checkout"  # takes no payment
PARTS = Parts(
    # The decision's words (orders.sql, webhooks_payment_succeeded).
    outcomes=(FULFILLED, HELD, INVOICE_PAYMENT, NOT_AN_ORDER, SUBSCRIPTION_CHECKOUT, SETUP_CHECKOUT),
    jobs=(ORDER_FULFILLED, PAYMENT_REVIEW),
)
# The payment's identity facts that its jobs carry under the same name.
_IDENTITY = ("session_id", "client_reference_id", "customer")

# The decision is SQL (webhooks_payment_succeeded, orders.sql; why a
# payment is held is webhooks_hold_reason), so that a success event's whole
# delivery can be one statement; inside a handler's transaction it is this one.
_SUCCESS_ARGUMENTS = """
    p_payment_id => %(payment_id)s, p_amount => %(amount)s, p_currency => %(currency)s,
    p_order => %(order)s, p_marker_key => %(marker_key)s, p_checkout_mode => %(checkout_mode)s,
    p_session_id => %(session_id)s, p_client_reference_id => %(client_reference_id)s,
    p_customer => %(customer)s, p_session_metadata => %(session_metadata)s::jsonb,
    p_intent_metadata => %(intent_metadata)s::jsonb, p_invoice_id => %(invoice_id)s"""
_SUCCEEDED = f"""
SELECT outcome, conflicting_account
FROM webhooks_payment_succeeded(
    p_event_id => %(event_id)s, p_event_type => %(event_type)s, p_account => %(account)s,
    p_at => %(at)s, {_SUCCESS_ARGUMENTS})
"""
# A success event accepted whole: the ledger's claim (its arguments are
# ledger.claim_arguments), the decision, the completion.
_ACCEPT = f"""
SELECT (delivery.claim).*, delivery.outcome, delivery.conflicting_account
FROM webhooks_deliver_payment_succeeded(
    p_provider => %(provider)s, p_event_id => %(event_id)s, p_event_type => %(event_type)s,
    p_account => %(account)s, p_livemode => %(livemode)s, p_created => %(created)s,
    p_payload => %(payload)s, {_SUCCESS_ARGUMENTS}) AS delivery
"""


@dataclass(frozen=True)
class Success:
    """What a success event says of its payment; `order` is a handler's own decision that it is one."""

    payment_id: str
    amount: int | None
    currency: str | None
    order: bool
    facts: dict[str, Any]

    def params(self, marker_key: str | None) -> dict[str, Any]:
        return {
            "payment_id": self.payment_id,
            "amount": self.amount,
            "currency": self.currency,
            "order": self.order,
            "marker_key": marker_key,
            **facts_params(self.facts),
        }

    def stated(self, event: Event) -> dict[str, Any]:
        """The fields of its job (webhooks_payment_job, orders.sql) that this event states.

        The SQL function completes them from the payment's row, whose columns
        were each written from such a statement.
        """
        metadata = {**(self.facts.get("intent_metadata") or {}), **(self.facts.get("session_metadata") or {})}
        identity = {name: self.facts[name] for name in _IDENTITY if self.facts.get(name) is not None}
        stated: dict[str, Any] = storable(
            {
                "payment_id": self.payment_id,
                "event_id": event.id,
                "event_type": event.type,
                "amount": self.amount,
                "currency": self.currency,
                "metadata": metadata,
                **identity,
            }
        )
        return stated


def success(
    event: Event,
    payment_id: str,
    amount: int | None,
    currency: str | None,
    *,
    order: bool = False,
    **facts: Any,
) -> Success:
    """What `event` says of its payment's success, refused (InvalidJob) if the job it can
    become would break that job's schema: the decision and the job are written
    by one SQL statement, so they are checked before it."""
    require_created(event)  # the success is ordered by it
    paid = Success(payment_id, amount, currency, order, facts)
    stated = paid.stated(event)
    for kind in (ORDER_FULFILLED, PAYMENT_REVIEW):
        jobs.check(kind, stated, partial=True)
    return paid


@dataclass(frozen=True)
class Orders:
    """Which succeeded payments ship, by the shop's order marker (WEBHOOK_ORDER_MARKER_KEY).

    Built once per process by the Stripe domain's `register` and bound into
    the handler of every success event, so a delivery, a backfill, a
    reprocess and a fetch judge a payment alike.
    """

    marker_key: str

    def succeeded(self, conn: psycopg.Connection, event: Event, paid: Success) -> str:
        """Record the success and ship the payment once, if it is an order and not refunded or disputed.

        Whatever the outcome, the status is recorded, so a later event (the
        session that makes it an order) finds the payment already succeeded.
        """
        return _succeeded(conn, event, paid, self.marker_key)

    def one_statement(self, success: Callable[[Event], Success | None], event: Event) -> OneStatement | None:
        """`event` accepted whole in one statement, for the success it states (None: none)."""
        paid = success(event)
        return None if paid is None else OneStatement(paid, self.marker_key)


@dataclass(frozen=True)
class OneStatement:
    """A success event's claim, decision and completion, as one statement on an autocommit connection."""

    paid: Success
    marker_key: str

    def accept(
        self, conn: psycopg.Connection, provider: str, event: Event
    ) -> tuple[ledger.Claim, str | None]:
        """The claim, and the outcome (None when the event id was taken: the claim then
        holds the answer to replay, read in the same statement)."""
        claim, (outcome, conflicting) = ledger.claim_in_one_statement(
            conn, _ACCEPT, provider, event, self.paid.params(self.marker_key)
        )
        if claim.ledger_id is None:
            return claim, None
        return claim, _decided(event, self.paid, outcome, conflicting)


def _succeeded(conn: psycopg.Connection, event: Event, paid: Success, marker_key: str | None) -> str:
    params = {
        "event_id": event.id,
        "event_type": event.type,
        "account": event.account_key,
        "at": event.created,
        **paid.params(marker_key),
    }
    outcome, conflicting = one(cursor(conn).execute(_SUCCEEDED, params))
    return _decided(event, paid, outcome, conflicting)


def _decided(event: Event, paid: Success, outcome: str, conflicting_account: str | None) -> str:
    if conflicting_account is not None:
        scope.alert(event, "payment", paid.payment_id, conflicting_account)
    return outcome


def fulfil_payment(
    conn: psycopg.Connection,
    event: Event,
    payment_id: str,
    amount: int | None,
    currency: str | None,
) -> str:
    """For a shop's own handler: `payment_id` succeeded and is an order; ship it once.

    The handler's decision makes it an order, so no order marker is read.
    """
    paid = success(event, require_id(payment_id, "payment id"), amount, currency, order=True)
    return _succeeded(conn, event, paid, marker_key=None)


def mark_invoice_payment(conn: psycopg.Connection, event: Event, payment_intent: str | None) -> None:
    """Record that `payment_intent` pays an invoice, so it is never shipped as an order.

    Called by the invoice events that name it (pre-basil `invoice.payment_intent`,
    basil's `invoice_payment.paid`); a no-op when they do not. A payment-mode
    Checkout Session's PaymentIntent stays an order: the invoice naming it is
    the session's post-purchase invoice (`invoice_creation`), orders.sql.
    """
    if not payment_intent:
        return
    invoice = event.object.get("invoice") if event.object.get("object") == "invoice_payment" else None
    payment = note(conn, event, payment_intent, invoice_id=invoice or event.object.get("id"))
    if payment.checkout_mode == "payment":
        return
    shipped = conn.execute("SELECT 1 FROM fulfilments WHERE payment_id = %s", [payment_intent]).fetchone()
    if shipped:
        # Only possible when an invoice's PaymentIntent carried the order marker.
        log.warning(
            "invoice_payment_already_shipped",
            payment_id=payment_intent,
            event_id=event.id,
            account=payment.account,
        )
