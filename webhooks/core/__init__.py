"""The delivery core: ingest (the transaction boundary), ledger, registry, outbox, events.

Knows no provider and no domain: handlers reach it through the registry.
"""
