"""The schema: migrations/*.sql, each applied once, then the SQL rule functions, under an advisory lock.

Migrations are history: each file is applied once, in name order, and never
changes after. The SQL functions that hold rules (the claim, a payment's
success, subscription access) live in `.sql` files beside the Python that
calls them (webhooks/**/*.sql), in their current definitions, each a
`CREATE OR REPLACE`: every migrate re-applies them after the migrations,
and records each file's hash, so a schema is current only when every
migration is applied and every definition is the one in the code.
schema.sql shows what they make together (schema.py).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import psycopg

from . import db

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS_DIR = ROOT / "migrations"
DEFINITIONS_DIR = ROOT / "webhooks"
# Any constant shared by every process that migrates this database.
_LOCK_KEY = 0x7765_6268_6F6F_6B73 & 0x7FFF_FFFF_FFFF_FFFF

_CREATE_TABLES = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS schema_definitions (
    name       text PRIMARY KEY,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

_RECORD_DEFINITION = """
INSERT INTO schema_definitions (name, sha256) VALUES (%s, %s)
ON CONFLICT (name) DO UPDATE SET sha256 = EXCLUDED.sha256, applied_at = now()
"""


def available(directory: Path = MIGRATIONS_DIR) -> list[Path]:
    return sorted(directory.glob("*.sql"))


def latest_version(directory: Path = MIGRATIONS_DIR) -> str | None:
    files = available(directory)
    return files[-1].stem if files else None


@functools.cache
def definitions(directory: Path = DEFINITIONS_DIR) -> dict[str, str]:
    """Each rule file's name (its path in the package) -> its text, read once per process."""
    return {
        path.relative_to(directory).as_posix(): path.read_text() for path in sorted(directory.rglob("*.sql"))
    }


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _exists(conn: psycopg.Connection, table: str) -> bool:
    (exists,) = db.one(conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table]))
    return bool(exists)


def applied_versions(conn: psycopg.Connection) -> set[str]:
    if not _exists(conn, "schema_migrations"):
        return set()
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def applied_definitions(conn: psycopg.Connection) -> dict[str, str]:
    if not _exists(conn, "schema_definitions"):
        return {}
    return dict(conn.execute("SELECT name, sha256 FROM schema_definitions").fetchall())


def missing(
    conn: psycopg.Connection, directory: Path = MIGRATIONS_DIR, rules: dict[str, str] | None = None
) -> list[str]:
    """The migrations not applied (every file, not only the newest: files can land out of
    order) and the rule files whose applied definition is not the code's."""
    rules = definitions() if rules is None else rules
    applied = applied_definitions(conn)
    done = applied_versions(conn)
    return [
        *(path.stem for path in available(directory) if path.stem not in done),
        *(name for name, text in rules.items() if applied.get(name) != _sha256(text)),
    ]


def is_current(
    conn: psycopg.Connection, directory: Path = MIGRATIONS_DIR, rules: dict[str, str] | None = None
) -> bool:
    return not missing(conn, directory, rules)


def migrate(url: str, directory: Path = MIGRATIONS_DIR, rules: dict[str, str] | None = None) -> list[str]:
    """Apply the migrations that are missing, then every rule definition; return the migrations applied.

    `rules` (name -> text) defaults to the package's .sql files; a test that
    migrates only part of the history passes none, as they need the whole.
    """
    rules = definitions() if rules is None else rules
    applied_now = []
    with psycopg.connect(url, autocommit=True) as conn:
        # Session lock: concurrent release commands wait, then find nothing to do.
        conn.execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
        try:
            conn.execute(_CREATE_TABLES)
            done = applied_versions(conn)
            for path in available(directory):
                if path.stem in done:
                    continue
                with conn.transaction():
                    conn.execute(path.read_text())
                    conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", [path.stem])
                applied_now.append(path.stem)
            with conn.transaction():
                for name, text in rules.items():
                    conn.execute(text)
                    conn.execute(_RECORD_DEFINITION, [name, _sha256(text)])
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [_LOCK_KEY])
    return applied_now
