"""The Stripe objects this domain acts on, one module each: a new object is its module, named here.

Each module brings its handlers, its parts (outcome words, job kinds,
metrics: core/parts.py) and its lookups (lookups.py). The order is
reconcile's: a Checkout payment is listed as its PaymentIntent and then as
its session, and the session's listing is the one its drift names.
"""

from __future__ import annotations

from . import checkout, disputes, fraud_warnings, intents, invoices, payments, refunds, subscriptions
from .lookups import gather, paths

MODULES = (payments, intents, checkout, refunds, disputes, fraud_warnings, invoices, subscriptions)
LOOKUPS = gather(MODULES)
# Stripe's `object` name -> the API path an object of it is fetched again from (thin.py).
PATHS = paths(LOOKUPS)
