"""schema.sql: the schema a fresh migrate makes, as one file to read.

The migrations are history and the rule files are the current functions, so
neither shows what a database holds. This module migrates a scratch schema
(every migration, then every rule file), dumps it with PostgreSQL 15's
`pg_dump --schema-only`, and normalises the dump so that it is the same on
every run and machine: no version banner or session settings, no owners or
grants, and no trace of the scratch schema's name. `python -m webhooks db
schema` writes it; tests/infra/test_schema.py fails when it and the migrations
disagree.

PostgreSQL 15 is the stack's server (docs/contract.md); another major
version prints the same schema differently, so both pg_dump and the server
must be 15.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import migrate

FILE = migrate.ROOT / "schema.sql"
PG_MAJOR = 15
# Debian's folder for the version's binaries, looked in before PATH.
_PG_BIN = Path(f"/usr/lib/postgresql/{PG_MAJOR}/bin")
# Far longer than a dump of this schema takes: past it pg_dump is stuck.
_PG_DUMP_TIMEOUT_S = 120

_HEADER = f"""\
-- The schema a fresh `python -m webhooks migrate` makes: migrations/*.sql,
-- then the rule files (webhooks/**/*.sql). Written by `python -m webhooks db
-- schema` from PostgreSQL {PG_MAJOR}'s pg_dump --schema-only; do not edit it by
-- hand. tests/infra/test_schema.py fails when the migrations and this file disagree.
"""
# Each object pg_dump writes starts with this comment.
_ENTRY = re.compile(r"^--\n-- Name: (.*); Type: (.*); Schema: .*; Owner: .*\n--\n", re.MULTILINE)
_END = "\n--\n-- PostgreSQL database dump complete\n"
_PARTITIONS = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relispartition AND c.relkind = 'r'
"""
# pg_dump sets the tablespace and access method before the first table it
# writes: paragraphs of their own after the object before it.
_SESSION_SETTINGS = re.compile(r"(\n\n+SET \w+ = [^\n]*;)+$")


class DumpError(Exception):
    """Why the schema could not be dumped: the line to show."""


class Unavailable(DumpError):
    """This machine cannot dump it: no PostgreSQL 15 pg_dump, or the server is not PostgreSQL 15."""


def pg_dump() -> Path:
    """PostgreSQL 15's pg_dump."""
    on_path = shutil.which("pg_dump")
    for place in (_PG_BIN / "pg_dump", *([Path(on_path)] if on_path else [])):
        if place.exists() and _major(_run([str(place), "--version"])) == PG_MAJOR:
            return place
    raise Unavailable(
        f"pg_dump of PostgreSQL {PG_MAJOR} not found (looked in {_PG_BIN} and PATH):"
        f" apt-get install postgresql-client-{PG_MAJOR}"
    )


def _major(version: str) -> int | None:
    match = re.search(r"\(PostgreSQL\) (\d+)", version)
    return int(match.group(1)) if match else None


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_PG_DUMP_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        raise DumpError(f"{argv[0]} did not finish in {_PG_DUMP_TIMEOUT_S} s") from None
    if done.returncode:
        first = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[0]
        raise DumpError(f"{argv[0]} failed: {first}")
    return done.stdout


def made_by_migrate(server_url: str, directory: Path = migrate.MIGRATIONS_DIR) -> str:
    """The normalised dump of a scratch schema that `directory`'s migrations and the rule files made."""
    dumper = pg_dump()
    scratch = f"schema_dump_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        major = conn.info.server_version // 10000
        if major != PG_MAJOR:
            raise Unavailable(
                f"schema.sql is PostgreSQL {PG_MAJOR}'s rendering and this server is PostgreSQL {major}:"
                f" point DATABASE_URL at a PostgreSQL {PG_MAJOR} server"
            )
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(scratch)))
        try:
            options = conninfo_to_dict(server_url).get("options", "")
            scoped = make_conninfo(server_url, options=f"{options} -c search_path={scratch}".strip())
            migrate.migrate(scoped, directory)
            # The password travels in pg_dump's environment, not its command line, which `ps` shows.
            params = conninfo_to_dict(server_url)
            password = params.pop("password", None)
            env = {**os.environ, **({"PGPASSWORD": str(password)} if password else {})}
            # The months a migrate makes are those around the day it ran: a partitioned
            # table is the schema, its months are data (webhooks/core/partitions.py).
            months = [f"--exclude-table={scratch}.{name}" for (name,) in conn.execute(_PARTITIONS, [scratch])]
            only = ["--schema-only", "--no-owner", "--no-privileges", f"--schema={scratch}", *months]
            raw = _run([str(dumper), *only, "--dbname", make_conninfo("", **params)], env)
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(scratch)))
    return normalised(raw, scratch)


def normalised(dump: str, schema: str) -> str:
    """pg_dump's text with only the objects: each under its name and type, in pg_dump's order."""
    body = dump.split(_END)[0]
    parts = _ENTRY.split(body)[1:]  # before the first entry: the banner and session settings
    entries = []
    for name, kind, statement in zip(parts[0::3], parts[1::3], parts[2::3], strict=True):
        if kind == "SCHEMA":
            continue
        entries.append(f"-- {kind}: {name}\n{_SESSION_SETTINGS.sub('', statement.strip())}\n")
    text = _HEADER + "".join(f"\n{entry}" for entry in entries)
    text = text.replace(f"{schema}.", "")
    if schema in text:
        raise DumpError(f"the dump names the scratch schema {schema} where it cannot be told apart")
    return text


def difference(committed: str, made: str, limit: int = 40) -> str:
    """The first lines of a unified diff from the committed file to what the migrations make."""
    diff = difflib.unified_diff(
        committed.splitlines(), made.splitlines(), FILE.name, "made by the migrations", n=1, lineterm=""
    )
    lines = list(diff)
    more = f"\n... {len(lines) - limit} more lines" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more
