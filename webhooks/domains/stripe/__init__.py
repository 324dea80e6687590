"""The Stripe domain: one module per Stripe object, each with its event handlers and its parts.

Built on the delivery core (events, registry, outbox) and Stripe's wire
format (webhooks/providers/stripe.py); never imports the commands, the web
edge or the worker. `register` is how a process takes it in: the handlers,
and what the core, the worker and /metrics read of the domain (outcome
words, job kinds, metrics, the access sweep) through the registry.
"""

from __future__ import annotations

from functools import partial

from webhooks.core.parts import Parts, Periodic
from webhooks.core.registry import Registry
from webhooks.infra.config import Settings
from webhooks.providers.stripe import EVENT_TYPES, IGNORED_OTHER_MODE, NAME

from . import access, checkout, fetch, intents, objects, orders, scope, thin, versions
from .orders import Orders

# The success events: their handlers ship orders, judged by the order marker
# bound in at registration. (type, handler, what its event says of the
# payment, for the one-statement delivery: None when its object is not
# paid, and the handler's transaction then says why; the object it carries.)
_SUCCESSES = (
    (
        "payment_intent.succeeded",
        intents.payment_intent_succeeded,
        intents.payment_success,
        intents.PaymentIntent,
    ),
    ("checkout.session.completed", checkout.checkout_completed, checkout.payment_success, checkout.Session),
    (
        "checkout.session.async_payment_succeeded",
        checkout.checkout_async_succeeded,
        checkout.payment_success,
        checkout.Session,
    ),
)
# Where Stripe's objects carry a person (Customer, Charge's billing_details,
# Checkout Session's customer_details, shipping): /admin shows none of them.
PERSONAL_FIELDS = frozenset(
    {
        "email",
        "name",
        "phone",
        "address",
        "shipping",
        "billing_details",
        "customer_details",
        "customer_email",
        "customer_name",
        "customer_phone",
        "customer_address",
        "customer_shipping",
        "receipt_email",
        "ip_address",
    }
)
# The modules besides the objects' that bring parts.
_SHARED = (orders, access, thin, fetch, scope, versions)


def register(registry: Registry, settings: Settings) -> None:
    """Add the Stripe handlers and parts, and the rules for the Stripe events none of the handlers takes."""
    registry.vocabulary(NAME, EVENT_TYPES)
    registry.include(*objects.MODULES, *_SHARED, provider=NAME)
    # The provider's admission settles a connected account's event of the other mode.
    registry.bring(Parts(outcomes=(IGNORED_OTHER_MODE,), personal=PERSONAL_FIELDS))
    shipping = Orders(settings.order_marker_key)
    for event_type, handler, success, reads in _SUCCESSES:
        registry.add(
            NAME,
            [event_type],
            partial(handler, orders=shipping),
            one_statement=partial(shipping.one_statement, success),
            reads=reads,
        )
    registry.unhandled(NAME, partial(thin.unhandled, registry))
    registry.guard(
        NAME, versions.Admission(registry, settings.stripe_api_versions, bool(settings.stripe_api_key))
    )
    registry.periodic(Periodic("access_sweep", settings.access_sweep_s, access.sweep))
