"""Applies migrations/*.sql in name order, each once, under an advisory lock."""
from __future__ import annotations

from pathlib import Path

import psycopg

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# Any constant shared by every process that migrates this database.
_LOCK_KEY = 0x7765_6268_6F6F_6B73 & 0x7FFF_FFFF_FFFF_FFFF

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def available(directory: Path = MIGRATIONS_DIR) -> list[Path]:
    return sorted(directory.glob("*.sql"))


def latest_version(directory: Path = MIGRATIONS_DIR) -> str | None:
    files = available(directory)
    return files[-1].stem if files else None


def applied_versions(conn: psycopg.Connection) -> set[str]:
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()[0]
    if not exists:
        return set()
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def is_current(conn: psycopg.Connection, directory: Path = MIGRATIONS_DIR) -> bool:
    latest = latest_version(directory)
    return latest is None or latest in applied_versions(conn)


def migrate(url: str, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply what is missing; return the versions applied by this call."""
    applied_now = []
    with psycopg.connect(url, autocommit=True) as conn:
        # Session lock: concurrent release commands wait, then find nothing to do.
        conn.execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
        try:
            conn.execute(_CREATE_TABLE)
            done = applied_versions(conn)
            for path in available(directory):
                if path.stem in done:
                    continue
                with conn.transaction():
                    conn.execute(path.read_text())
                    conn.execute(
                        "INSERT INTO schema_migrations (version) VALUES (%s)", [path.stem]
                    )
                applied_now.append(path.stem)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [_LOCK_KEY])
    return applied_now
