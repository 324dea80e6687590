"""The API for a shop's own handlers: `@handles("type")`, the outcome words, the building blocks.

A handler takes the claim's connection and the parsed event and returns the
outcome word stored in the ledger. Mark one with `@handles("type")` (a
Stripe event type; `provider="shopify"` and so on for another sender's) in a
module named by WEBHOOK_HANDLER_MODULES. Every process (the web app, the
commands, the worker) includes that module after the built-in domains
(webhooks/bootstrap.py), so a type handled there replaces the built-in
handler everywhere alike.

A handler's error is recorded and logged by its class and where it was
raised; its text is shown (in `events show`, its `--json` and /admin) only
when its class is a PublicError, whose text names a field or a rule and
never a value from the payload (a customer's email in an error would reach
`webhook_failures`, /admin and the logs).

A registration that could never run is refused when the process starts, in
one line naming WEBHOOK_HANDLER_MODULES' module: a handler that is not
callable, a Stripe type Stripe's spec does not list (with the nearest one),
and `registry.handler(...)` of a type nothing handles.
"""

from __future__ import annotations

from collections.abc import Callable

from webhooks.core.outcomes import (  # the vocabulary handlers return
    ALREADY_FULFILLED,
    AWAITING_PAYMENT,
    FULFILLED,
    IGNORED,
    NOT_PAID,
    NOTIFIED,
    SUPERSEDED,
)
from webhooks.core.registry import Handler, OneStatementPlan, Registry
from webhooks.core.registry import handles as _handles
from webhooks.domains.stripe.orders import fulfil_payment
from webhooks.infra.errors import PublicError
from webhooks.providers.stripe import NAME as STRIPE

__all__ = [
    "ALREADY_FULFILLED",
    "AWAITING_PAYMENT",
    "FULFILLED",
    "IGNORED",
    "NOT_PAID",
    "NOTIFIED",
    "SUPERSEDED",
    "Handler",
    "PublicError",
    "Registry",
    "fulfil_payment",
    "handles",
]


def handles(
    *event_types: str,
    provider: str = STRIPE,
    one_statement: OneStatementPlan | None = None,
    unlisted: bool = False,
) -> Callable[[Handler], Handler]:
    """Mark a handler of `event_types` (Stripe's unless `provider` says another sender's).

    A Stripe type must be one Stripe's spec lists (a typo is refused at
    start, with the nearest type); `unlisted=True` takes one it does not on
    purpose (a test's own type).
    """
    return _handles(*event_types, provider=provider, one_statement=one_statement, unlisted=unlisted)
