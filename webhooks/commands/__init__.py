"""`python -m webhooks COMMAND`: the operator's entry points."""
from __future__ import annotations

import argparse
import os

from . import backfill, db as dbcli, errors, events as ledger_cli, reconcile, replay, prune as retention, serve, subscriptions as subscriptions_cli
from webhooks.traffic import sender as loadtest
from webhooks.worker import loop as worker

from webhooks.infra import migrate
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url
from webhooks.infra.logs import configure as configure_logging


def _migrate(args: argparse.Namespace) -> int:
    applied = migrate.migrate(database_url(Settings.from_env()))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'schema is current'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m webhooks", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "migrate", help="apply migrations/*.sql once, under an advisory lock"
    ).set_defaults(func=_migrate)
    serve.register(commands)
    dbcli.register(commands)
    worker.register(commands)
    ledger_cli.register(commands)
    retention.register(commands)
    replay.register(commands)
    loadtest.register(commands)
    subscriptions_cli.register(commands)
    backfill.register(commands)
    reconcile.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not hasattr(args, "extra_args"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra_args = extra
    # Before anything logs: JSON lines, short tracebacks, no locals (so no payloads).
    configure_logging(os.environ.get("LOG_LEVEL", "INFO"))
    return errors.run(args.func, args)
