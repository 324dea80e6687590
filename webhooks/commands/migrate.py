"""`python -m webhooks migrate` (the Procfile's `release:`): bring the database's schema up to the code's."""

from __future__ import annotations

import argparse

from webhooks.infra import migrate
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url


def _migrate(args: argparse.Namespace) -> int:
    applied = migrate.migrate(database_url(Settings.from_env()))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'schema is current'}")
    return 0


def register(commands) -> None:
    commands.add_parser("migrate", help="apply migrations/*.sql once, under an advisory lock").set_defaults(
        func=_migrate
    )
