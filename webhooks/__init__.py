"""Exactly-once Stripe webhook ingestion on PostgreSQL."""
