"""The customer's return from Checkout: the second trigger of Stripe's fulfilment function.

Stripe's "Fulfill orders" guide (https://docs.stripe.com/checkout/fulfillment)
has one fulfilment function and two triggers: the webhook, which is required
("it's not guaranteed customers visit that page"), and the redirect to the
shop's success page, so the customer sees the order at once. The function
"might be called multiple times, possibly concurrently, for the same
Checkout Session": it retrieves the session with `line_items` expanded,
checks `payment_status`, fulfils the line items and records that it did.

Here that is `fulfil`: the session is read from Stripe's API before any
connection is checked out, with every page of its line items, which are
stored (line_items.py). The session then goes through the claim
(core/ingest.py) as a `checkout.session.completed` event of its own,
`<session id>:returned:<payment_status>`, so it meets the same handler, the
same order rules and the same unique key on the payment as the webhook's
deliveries: whichever comes first ships the order, the others answer
`already_fulfilled`. A concurrent return call waits on the claim, and one
racing a delivery on the payment's row, for the lock timeout a duplicate
delivery waits. Its id carries the payment status, so a return before a
delayed payment (`awaiting_payment`) does not stand for the one after it.
"""

from __future__ import annotations

import functools
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import stripe
import structlog

from webhooks.core import jobs
from webhooks.core.events import InvalidEvent, Json
from webhooks.core.outcomes import ALREADY_FULFILLED, FULFILLED
from webhooks.infra import db
from webhooks.infra.config import Settings
from webhooks.providers.stripe import NAME, parse

from . import api as stripe_api
from . import line_items
from .orders import INVOICE_PAYMENT, NOT_AN_ORDER, SETUP_CHECKOUT, SUBSCRIPTION_CHECKOUT
from .payments import payment_id_of

log = structlog.get_logger(__name__)

# Stripe's Checkout Session ids: `cs_test_...` or `cs_live_...`, letters and digits.
SESSION_ID = re.compile(r"cs_(?:(test|live)_)?[A-Za-z0-9]{1,255}")
ACCOUNT_ID = re.compile(r"acct_[A-Za-z0-9]{1,255}")
RETURNED = ":returned:"
EVENT_TYPE = "checkout.session.completed"
# Seconds a caller is asked to wait: a claim in flight ends within the lock
# timeout; Stripe or the database being down lasts longer.
_IN_FLIGHT_RETRY_S = 1
_UNAVAILABLE_RETRY_S = 5
# Outcomes that say the session's payment is not a one-off order.
_NOT_AN_ORDER = frozenset({NOT_AN_ORDER, SUBSCRIPTION_CHECKOUT, SETUP_CHECKOUT, INVOICE_PAYMENT})


@dataclass(frozen=True)
class Returned:
    """The answer to a return call: its HTTP status, its JSON body, and when to try again (if at all)."""

    status: int
    body: dict[str, Any]
    retry_after: int | None = None

    @property
    def outcome(self) -> str:
        return str(self.body.get("outcome") or self.body.get("error"))


def refused(status: int, error: str, detail: str | None = None, retry_after: int | None = None) -> Returned:
    return Returned(status, {"error": error, **({"detail": detail} if detail else {})}, retry_after)


def fulfil(service: jobs.Service, session_id: str, account: str | None = None) -> Returned:
    """Retrieve the session, then fulfil it through the claim, once whichever trigger comes first."""
    started = time.perf_counter()
    returned = _fulfil(service, session_id, account)
    log.info(
        "checkout_return",
        session_id=session_id if SESSION_ID.fullmatch(session_id) else None,
        account=account,
        outcome=returned.outcome,
        status=returned.status,
        duration_ms=round((time.perf_counter() - started) * 1000, 2),
    )
    return returned


def _fulfil(service: jobs.Service, session_id: str, account: str | None) -> Returned:
    settings = service.settings
    wrong = _wrong_request(settings, session_id, account)
    if wrong is not None:
        return wrong
    try:
        session, items = retrieve(settings, session_id, account)
    except stripe_api.NotFound:
        return refused(
            404, "no_such_session", "Stripe knows no such Checkout Session for this key and account"
        )
    except stripe_api.Unavailable as exc:
        return refused(503, "stripe_unavailable", str(exc), _UNAVAILABLE_RETRY_S)
    except stripe_api.ApiFailed as exc:
        return refused(502, "stripe_refused", str(exc))
    wrong = _wrong_session(settings, session)
    if wrong is not None:
        return wrong
    if session.get("mode", "payment") == "payment":
        with db.connection(service.pool.get()) as conn:
            line_items.store(conn, session_id, account, items)
    try:
        event = parse(json.dumps(returned_event(session, settings, account)))
    except InvalidEvent as exc:
        return refused(502, "invalid_session", str(exc))
    return _answered(service.accept(NAME, event), session, items)


def _wrong_request(settings: Settings, session_id: str, account: str | None) -> Returned | None:
    """A 4xx for what is wrong before Stripe is asked: the id, the account, the mode."""
    found = SESSION_ID.fullmatch(session_id)
    if found is None:
        return refused(400, "invalid_session_id", "not a Checkout Session id (cs_...)")
    if account is not None and (
        not ACCOUNT_ID.fullmatch(account) or account not in settings.stripe_connect_accounts
    ):
        return refused(400, "unknown_account", "the account is not one of STRIPE_CONNECT_ACCOUNTS")
    if found[1] and found[1] != settings.stripe_mode:
        return refused(
            400, "livemode_mismatch", f"a {found[1]} session; this service takes {settings.stripe_mode}"
        )
    return None


def _wrong_session(settings: Settings, session: Json) -> Returned | None:
    """A 4xx for a session that is not one to fulfil: of the other mode, or not completed."""
    if session.get("object") != "checkout.session":
        return refused(502, "invalid_session", "Stripe's answer is not a Checkout Session")
    if session.get("livemode") is not (settings.stripe_mode == "live"):
        return refused(400, "livemode_mismatch", f"this service takes {settings.stripe_mode} sessions")
    if session.get("status") in ("open", "expired"):
        return refused(409, "session_not_complete", f"the session is {session['status']}")
    return None


@functools.lru_cache(maxsize=1)
def _client(settings: Settings) -> stripe.StripeClient:
    """The return call's client: its own timeout, no retries (the caller is told when to try again)."""
    return stripe_api.client(
        settings.model_copy(
            update={"stripe_api_timeout_s": settings.fulfil_stripe_timeout_s, "stripe_api_retries": 0}
        )
    )


def retrieve(settings: Settings, session_id: str, account: str | None) -> tuple[Json, list[Json]]:
    """The session with `line_items` expanded, and every one of them, every page read."""
    api = _client(settings)
    session = stripe_api.get(
        api, f"{line_items.SESSIONS}{session_id}", account=account, expand=line_items.SESSION_EXPAND
    )
    first = session.get("line_items")
    return session, line_items.read_all(api, session_id, first if isinstance(first, dict) else None, account)


def returned_event(session: Json, settings: Settings, account: str | None) -> dict[str, Any]:
    """The session as the event the claim takes: its line items are stored apart, not in the ledger."""
    return {
        "id": f"{session.get('id')}{RETURNED}{session.get('payment_status')}",
        "object": "event",
        "api_version": settings.stripe_api_version,
        "created": int(time.time()),
        "livemode": session.get("livemode"),
        "type": EVENT_TYPE,
        "data": {"object": {key: value for key, value in session.items() if key != "line_items"}},
        **({"account": account} if account else {}),
    }


def _answered(answer: jobs.Answered, session: Json, items: list[Json]) -> Returned:
    if answer.status == 409:
        return refused(409, "in_progress", "a trigger of this order is in flight", _IN_FLIGHT_RETRY_S)
    if answer.status == 503:
        return refused(503, "database_unavailable", None, _UNAVAILABLE_RETRY_S)
    if answer.status == 400:
        return refused(502, "invalid_session", "Stripe's session is not one an event can carry")
    if answer.status == 422:
        return refused(422, "invalid_session", "Stripe's session breaks a rule the handlers read by")
    if answer.status != 200:
        # Recorded as the delivery's failure (webhook_failures), for an operator.
        return refused(503, "fulfilment_failed", None, _UNAVAILABLE_RETRY_S)
    outcome = _outcome(answer)
    paid = session.get("mode", "payment") == "payment" and outcome not in _NOT_AN_ORDER
    return Returned(
        200,
        {
            "outcome": NOT_AN_ORDER if outcome in _NOT_AN_ORDER else outcome,
            "order_id": payment_id_of(session.get("payment_intent"), session.get("id")) if paid else None,
            "session_id": session.get("id"),
            "line_items": items,
        },
    )


def _outcome(answer: jobs.Answered) -> str:
    """The handler's outcome; a replayed one is the stored answer's, and what this call shipped
    before is `already_fulfilled` to a later call."""
    if not answer.replayed:
        return answer.outcome
    stored = json.loads(answer.body).get("outcome", "")
    return ALREADY_FULFILLED if stored == FULFILLED else str(stored)
