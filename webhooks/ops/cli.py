"""`python -m webhooks COMMAND`: the operator's entry points."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import (
    backfill, ledger_cli, loadtest, reconcile, replay, retention, subscriptions_cli, worker,
)

from ..service import migrate
from ..service.config import Settings
from ..service.db import database_url

ROOT = Path(__file__).resolve().parents[2]


def _migrate(args: argparse.Namespace) -> int:
    applied = migrate.migrate(database_url(Settings.from_env()))
    print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'schema is current'}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    """Migrate, then hand the process to gunicorn with the project's config."""
    url = database_url(Settings.from_env())
    migrate.migrate(url)
    # Workers inherit the resolved URL, so they never start a second embedded server.
    os.environ["DATABASE_URL"] = url
    if args.port:
        os.environ["PORT"] = str(args.port)
    os.chdir(ROOT)
    argv = ["gunicorn", "--config", str(ROOT / "gunicorn.conf.py"), "wsgi:app"]
    os.execvp(sys.executable, [sys.executable, "-m", *argv])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m webhooks", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "migrate", help="apply migrations/*.sql once, under an advisory lock"
    ).set_defaults(func=_migrate)
    serve = commands.add_parser(
        "serve",
        help="migrate and run the service under gunicorn "
        "(an embedded PostgreSQL in ./.data/pg when DATABASE_URL is unset)",
    )
    serve.add_argument("--port", type=int, help="listen port (default: $PORT or 8000)")
    serve.set_defaults(func=_serve)
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
    args = build_parser().parse_args(argv)
    return args.func(args)
