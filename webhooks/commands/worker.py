"""`python -m webhooks worker`: the outbox worker (webhooks/worker/loop.py).

As the Procfile's `worker:` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

import psycopg
import structlog

from webhooks import bootstrap
from webhooks.infra import migrate
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url
from webhooks.worker import loop

from .errors import CommandError, not_migrated

log = structlog.get_logger(__name__)


def _worker(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    # pgqueuer's own INFO lines repeat our outbox_retry; its errors still show.
    logging.getLogger("pgqueuer").setLevel(logging.WARNING)
    if not settings.outbox_url:
        raise CommandError("WEBHOOK_OUTBOX_URL is not set: the worker POSTs each outbox job there")
    # The stripe.fetch job applies events, and a bulk reprocess re-runs them (a connection of its own):
    # the same handlers as the web app's.
    service = bootstrap.build(settings, min_size=1, max_size=3)
    with psycopg.connect(database_url(settings)) as conn:
        if not migrate.is_current(conn):
            raise CommandError(not_migrated())
    try:
        asyncio.run(loop.run(service, settings.outbox_url))
    finally:
        service.close()
    return 0


def register(commands) -> None:
    commands.add_parser(
        "worker",
        help="deliver outbox jobs to WEBHOOK_OUTBOX_URL (run as many as you like)",
    ).set_defaults(func=_worker)
