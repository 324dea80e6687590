"""The Shopify domain: one module per Shopify object, each registering its handlers.

Handlers are keyed by (provider "shopify", topic) and run inside the claim's
transaction, like the Stripe domain's; they build on the delivery core only.
"""
