"""The service: HTTP, ingest (the transaction boundary), ledger, events, signature, db, config.

Imports nothing from `webhooks.stripe` or `webhooks.ops`: handlers reach it
through the registry.
"""
