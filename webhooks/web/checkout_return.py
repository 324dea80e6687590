"""`POST /stripe/checkout/sessions/<session_id>/fulfil`: the shop's success page reports a customer's return.

The shop's backend calls it with the `{CHECKOUT_SESSION_ID}` its `success_url`
carried (docs/checkout-return.md) and `Authorization: Bearer
WEBHOOK_FULFIL_TOKEN`; without that setting the route does not exist (404).
What it does is the Stripe domain's (domains/stripe/returns.py, through
`Service.fulfil_checkout`), which `webhooks fulfil` runs from a shell too;
this module authenticates, names the Connect account (`?account=acct_...`),
and writes the answer. Each call costs
Stripe API calls, so the front limits how often one client may make it
(WEBHOOK_FULFIL_RATE_PER_MINUTE, front.py).

Whatever fails, the answer is JSON with an `error` word: never a 500 or a
traceback, and the log line names the error's class, never a value.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any

import structlog
from flask import Blueprint, Flask, Response, current_app, request

from webhooks import bootstrap

from . import RETURN_PREFIX

log = structlog.get_logger(__name__)

RULE = RETURN_PREFIX + "<session_id>/fulfil"
bp = Blueprint("checkout_return", __name__)
# A failure nobody foresaw: the caller tries again a little later, as after Stripe's.
_FAILED_RETRY_S = 5


# Where each answered call is counted (metrics.Metrics.checkout_return): its outcome or error, and status.
Report = Callable[[str, int], None]


def install(app: Flask, service: bootstrap.Service, report: Report) -> None:
    """The route, if WEBHOOK_FULFIL_TOKEN is set, each answer counted by `report`."""
    if not service.settings.fulfil_token:
        return
    app.extensions["webhooks.checkout_return"] = (service, report)
    app.register_blueprint(bp)


@bp.post(RULE)
def fulfil(session_id: str) -> Response:
    service, report = current_app.extensions["webhooks.checkout_return"]
    status, body, headers = _answer(service, session_id)
    report(str(body.get("outcome") or body.get("error")), status)
    return Response(json.dumps(body, separators=(",", ":")), status, headers, mimetype="application/json")


def _answer(service: bootstrap.Service, session_id: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, JSON body and headers of the answer."""
    if not _authorized(service.settings.fulfil_token or ""):
        return 401, {"error": "token_required"}, {"WWW-Authenticate": "Bearer"}
    try:
        answer = service.fulfil_checkout(session_id, request.args.get("account") or None)
    except Exception as exc:
        # Its class only: an exception's text may quote what Stripe or the database held.
        log.error("checkout_return_failed", error=type(exc).__name__)
        return 503, {"error": "fulfilment_failed"}, {"Retry-After": str(_FAILED_RETRY_S)}
    retry = {"Retry-After": str(answer.retry_after)} if answer.retry_after is not None else {}
    return answer.status, answer.body, retry


def _authorized(token: str) -> bool:
    presented = request.headers.get("Authorization", "")
    scheme, _, value = presented.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())
