"""What the providers publish, trimmed to what tests/providers/test_provider_corpus.py needs (README.md).

The Stripe event types are read from the installed `stripe` package, each
type's object from Stripe's own fixtures3.json by the object name the type
starts with.
"""

from __future__ import annotations

import typing

from stripe.params import _webhook_endpoint_create_params as endpoint_params

# Types whose object is named otherwise in fixtures3.json than in the type.
_RENAMED = {"issuing_": "issuing.", "source.transaction": "source_transaction"}


def stripe_types() -> list[str]:
    """Every event type a webhook endpoint can enable, as the installed stripe package lists them."""
    (listed,) = typing.get_args(endpoint_params.WebhookEndpointCreateParams.__annotations__["enabled_events"])
    return [t for t in typing.get_args(listed) if t != "*"]


def stripe_resource(event_type: str, resources: typing.Container[str]) -> str | None:
    """The fixtures3.json resource of `event_type`'s object: the longest tail of its prefix that is one.

    `customer.subscription.updated` carries a `subscription`, `charge.dispute.created` a `dispute`.
    """
    prefix = event_type.rsplit(".", 1)[0]
    for old, new in _RENAMED.items():
        prefix = prefix.replace(old, new)
    parts = prefix.split(".")
    return next((".".join(parts[i:]) for i in range(len(parts)) if ".".join(parts[i:]) in resources), None)
