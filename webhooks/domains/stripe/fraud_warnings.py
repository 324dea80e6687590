"""Radar early fraud warnings: the card issuer says a charge may be fraudulent.

Stripe's docs, The Early Fraud Warning object
(https://docs.stripe.com/api/early_fraud_warnings/object): "An EFW is
actionable if it has not received a dispute and has not been fully refunded.
You may wish to proactively refund a charge that receives an EFW, in order to
avoid receiving a dispute later." So a warning is to a payment what a
dispute is: one that arrives before the payment's success holds its order
(`payment.review`, reason `fraud_warning`, decided in SQL by
webhooks_hold_reason, orders.sql); one that arrives after the order
shipped is told to the shop, once per warning (`payment.fraud_warning`, with
the charge, the fraud type and `actionable`), for it to refund or not.

A warning is keyed by its id and locks its payment's row first, like every
event of a payment. `radar.early_fraud_warning.updated` carries the whole
warning; `actionable` only goes from true to false, so a stale update cannot
make it actionable again.
"""

from __future__ import annotations

from typing import Literal

import psycopg
from pydantic import ConfigDict

from webhooks.core import jobs, outbox
from webhooks.core.events import Event, id_of, require_id
from webhooks.core.parts import Parts
from webhooks.core.registry import handles
from webhooks.infra.db import one

from . import scope
from .declared import Expandable, Flag, Id, StripeObject, Word
from .payments import note, payment_id_of


class EarlyFraudWarning(StripeObject):
    """The Early Fraud Warning fields the handlers read (https://docs.stripe.com/api/early_fraud_warnings/object)."""

    object: Literal["radar.early_fraud_warning"]
    id: Id
    charge: Expandable
    payment_intent: Expandable | None = None
    fraud_type: Word | None = None
    actionable: Flag | None = None


FRAUD_WARNING_REPORTED = "fraud_warning_reported"  # the order had shipped: payment.fraud_warning
FRAUD_WARNING_RECORDED = "fraud_warning_recorded"  # not shipped: its success will be held
FRAUD_WARNING_UPDATED = "fraud_warning_updated"  # a warning already known


class PaymentFraudWarningJob(jobs.Job):
    """Stripe suggests refunding such a charge. Key: `payment.fraud_warning:<warning_id>`."""

    model_config = ConfigDict(title="An early fraud warning on an order already shipped")

    kind: Literal["payment.fraud_warning"]
    payment_id: str
    """the PaymentIntent id (a Charges-API payment's charge id, or a session without a PaymentIntent's own
    id)"""
    account: str | None
    """the Connect account (`acct_...`) the object belongs to; null for the platform's own"""
    warning_id: str
    """the Radar early fraud warning's id"""
    charge: str | None
    """the charge it is about"""
    fraud_type: str | None
    """Stripe's `fraud_type`"""
    actionable: bool | None
    """whether the charge can still be refunded to avoid a dispute"""
    event_id: str
    """the event whose delivery enqueued the job"""


FRAUD_WARNING_JOB = jobs.documented(PaymentFraudWarningJob)
PARTS = Parts(
    outcomes=(FRAUD_WARNING_REPORTED, FRAUD_WARNING_RECORDED, FRAUD_WARNING_UPDATED),
    jobs=(FRAUD_WARNING_JOB,),
)

_STORED = "SELECT actionable, account FROM fraud_warnings WHERE warning_id = %s"

_UPSERT = """
INSERT INTO fraud_warnings AS w
    (warning_id, account, payment_id, charge_id, fraud_type, actionable, event_id)
VALUES (%(warning_id)s, %(account)s, %(payment_id)s, %(charge_id)s, %(fraud_type)s,
        %(actionable)s, %(event_id)s)
ON CONFLICT (warning_id) DO UPDATE
SET actionable = w.actionable AND EXCLUDED.actionable,
    fraud_type = coalesce(EXCLUDED.fraud_type, w.fraud_type), updated_at = now()
RETURNING actionable
"""

_WARN_PAYMENT = "UPDATE payments SET fraud_warned = true, updated_at = now() WHERE payment_id = %s"

_SHIPPED = "SELECT 1 FROM fulfilments WHERE payment_id = %s"


@handles("radar.early_fraud_warning.created", "radar.early_fraud_warning.updated", reads=EarlyFraudWarning)
def warning_changed(conn: psycopg.Connection, event: Event) -> str:
    warning = event.object
    warning_id = require_id(warning.get("id"), "early fraud warning id")
    charge = id_of(warning.get("charge"))
    payment_id = payment_id_of(id_of(warning.get("payment_intent")), charge)
    note(conn, event, payment_id)
    known = scope.stored(conn, event, "fraud_warning", warning_id, _STORED) is not None
    (actionable,) = one(
        conn.execute(
            _UPSERT,
            {
                "warning_id": warning_id,
                "account": event.account_key,
                "payment_id": payment_id,
                "charge_id": charge,
                "fraud_type": warning.get("fraud_type"),
                "actionable": warning.get("actionable") is not False,
                "event_id": event.id,
            },
        )
    )
    conn.execute(_WARN_PAYMENT, [payment_id])
    if known:
        return FRAUD_WARNING_UPDATED
    if conn.execute(_SHIPPED, [payment_id]).fetchone() is None:
        return FRAUD_WARNING_RECORDED
    outbox.enqueue(
        conn,
        FRAUD_WARNING_JOB,
        {
            "payment_id": payment_id,
            "account": event.account,
            "warning_id": warning_id,
            "charge": charge,
            "fraud_type": warning.get("fraud_type"),
            "actionable": actionable,
            "event_id": event.id,
        },
        idempotency_key=f"{FRAUD_WARNING_JOB.name}:{warning_id}",
    )
    return FRAUD_WARNING_REPORTED
