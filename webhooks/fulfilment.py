"""What an event does to the shop: the handler registry and the built-in handlers.

A handler takes the claim's connection and the parsed event and returns the
outcome word stored in the ledger. Register one with `@handles("type")`, in
a module named by WEBHOOK_HANDLER_MODULES. The built-in handlers live in one
module per business object and register when this module is imported.
"""
from __future__ import annotations

from webhooks.core.outcomes import (  # noqa: F401  (the vocabulary handlers return)
    ALREADY_FULFILLED,
    AWAITING_PAYMENT,
    FULFILLED,
    IGNORED,
    NOTIFIED,
    SUPERSEDED,
)
from webhooks.domains.stripe import (  # noqa: F401  (they register)
    checkout,
    disputes,
    fraud_warnings,
    intents,
    invoices,
    refunds,
    subscriptions,
    thin,
)
from webhooks.domains.stripe.orders import fulfil_payment  # noqa: F401
from webhooks.core.registry import Handler, handles, load, run  # noqa: F401
