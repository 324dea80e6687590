"""What would make every delivery fail, found at start and said loudly.

A server with no signing secret or on an unmigrated database looks healthy
from the outside; each worker logs why it is not, /readyz answers 503, and
deliveries get a retryable 503 instead of an answer that blames the sender
or a handler.
"""

from __future__ import annotations

import psycopg
import structlog

from webhooks.infra import migrate
from webhooks.infra.config import Settings
from webhooks.infra.db import connection, database_url
from webhooks.providers import Providers

log = structlog.get_logger(__name__)

SECRET_MISSING = "webhook_secret_missing"
SCHEMA_NOT_CURRENT = "schema_not_current"
DATABASE_UNAVAILABLE = "database_unavailable"


class SchemaGate:
    """Whether this process knows the schema to be current with the code's migrations.

    Once current it stays current (migrations only add), so a migrated
    server pays one query per process, not one per delivery.
    """

    def __init__(self, pool):
        self._pool = pool
        self._current = False

    def refusal(self) -> str | None:
        """None when deliveries may proceed; else the 503's error word.

        Asked within the pool's own wait: a database that does not answer
        here is answered for at once, not waited for a second time by the
        delivery.
        """
        if self._current:
            return None
        try:
            with connection(self._pool.get()) as conn:
                self._current = migrate.is_current(conn)
        except Exception:
            return DATABASE_UNAVAILABLE
        return None if self._current else SCHEMA_NOT_CURRENT


def secret_missing(settings: Settings, providers: Providers) -> bool:
    """A required provider (Stripe) has no secret: no delivery of it can be verified."""
    return any(p.required and not p.secrets(settings) for p in providers)


def announce(settings: Settings, providers: Providers) -> None:
    """Log, at start, each reason the service cannot take deliveries."""
    for provider in providers:
        secrets = provider.secrets(settings)
        if secrets:
            continue
        if provider.required:
            log.error(
                SECRET_MISSING,
                fix=f"set {provider.secret_setting} to its endpoint's signing secret",
                effect="/readyz and every delivery answer 503 until then",
            )
        else:
            # A warning, not an error: most shops use only some providers.
            log.warning(
                "provider_disabled",
                provider=provider.name,
                reason=SECRET_MISSING,
                fix=f"set {provider.secret_setting} to enable it",
                effect=f"POST /webhooks/{provider.name} answers 503 {SECRET_MISSING}",
            )
    try:
        # Its own connection, not the pool's: a pool only says it timed out,
        # and the cause (a missing database, a refused login) is the news.
        with psycopg.connect(database_url(settings), connect_timeout=2) as conn:
            missing = migrate.missing(conn)
    except psycopg.Error as exc:
        log.error(
            DATABASE_UNAVAILABLE,
            error=" ".join(str(exc).split())[:300],
            effect="/readyz and every delivery answer 503 until it answers",
        )
        return
    if missing:
        log.error(
            SCHEMA_NOT_CURRENT,
            # Migrations not applied, rule definitions not the code's; the first few.
            missing=missing[:10],
            fix="run `python -m webhooks migrate` (the Procfile's release process)",
            effect="/readyz and every delivery answer 503 until then",
        )
