"""`python -m webhooks db url|psql|stop|schema`: the database the service uses, for a person.

With DATABASE_URL unset that is the embedded server in <project>/.data/pg
(or WEBHOOK_DATA_DIR), started if it is not running. `schema` rewrites
schema.sql from a fresh migrate into a scratch schema of that database
(webhooks/infra/schema.py).
"""

from __future__ import annotations

import argparse
import os
import shutil

from webhooks.infra import embedded, schema
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url

from .errors import CommandError


def _url(args: argparse.Namespace) -> int:
    print(database_url(Settings.from_env()))
    return 0


def _psql(args: argparse.Namespace) -> int:
    url = database_url(Settings.from_env())
    client = shutil.which("psql") or embedded.psql()
    os.execv(client, [client, url, *args.extra_args])


def _stop(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    if settings.database_url:
        raise CommandError("DATABASE_URL is set: that server is not ours to stop")
    folder = embedded.pgdata(settings.data_dir)
    print(
        f"stopped the embedded PostgreSQL in {folder}"
        if embedded.stop(folder)
        else f"no embedded PostgreSQL running in {folder}"
    )
    return 0


def _schema(args: argparse.Namespace) -> int:
    try:
        made = schema.made_by_migrate(database_url(Settings.from_env()))
    except schema.DumpError as exc:
        raise CommandError(str(exc)) from None
    if schema.FILE.exists() and schema.FILE.read_text() == made:
        print(f"{schema.FILE} is current")
        return 0
    schema.FILE.write_text(made)
    print(f"wrote {schema.FILE} ({len(made.splitlines())} lines): commit it with the migrations")
    return 0


def register(commands) -> None:
    db = commands.add_parser(
        "db", help="print the database URL, open psql on it, stop the embedded one, write schema.sql"
    )
    actions = db.add_subparsers(dest="action", required=True)
    actions.add_parser("url", help="print the URL (starts the embedded server if needed)").set_defaults(
        func=_url
    )
    psql = actions.add_parser("psql", help="open psql on it; extra arguments go to psql")
    # Unknown options (-c "SELECT ...") are psql's: main passes them through.
    psql.set_defaults(func=_psql, extra_args=[])
    actions.add_parser(
        "stop", help="stop the embedded server (bin/serve stops the one it started)"
    ).set_defaults(func=_stop)
    actions.add_parser(
        "schema",
        help=f"rewrite schema.sql from a fresh migrate (PostgreSQL {schema.PG_MAJOR}'s pg_dump)",
    ).set_defaults(func=_schema)
