"""The Stripe domain: one module per Stripe object, each registering its event handlers.

Built on `webhooks.service` (events, registry, outbox); never imports the operator tools.
"""
