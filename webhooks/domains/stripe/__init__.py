"""The Stripe domain: one module per Stripe object, each registering its event handlers.

Built on the delivery core (events, registry, outbox); never imports the commands or the web edge.
"""
