"""A database per test, copied from one migrated template per run.

Migrating replays every migration and rule file: done once per run into a
template database, each test gets a `CREATE DATABASE ... TEMPLATE` copy of
it (a copy is cheaper than a replay, and a test may change its schema
without touching another test's). tests/infra/test_schema.py still compares
a fresh migrate with schema.sql, and the tests of migrating itself replay the
history (conftest.migrated_schema).

Every process of a run (the xdist workers) holds one idle connection named
for the run while it uses the template. The first to need the template makes
it, the last to finish drops it, and whoever makes one drops the databases of
runs that no process holds any more (a run that was killed).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from webhooks.infra import migrate

PREFIX = "webhooks_test"
# The run's id, in hex: bin/test gives its two passes one, xdist gives its workers one, a
# run without either makes its own.
RUN = (os.environ.get("WEBHOOKS_TEST_RUN") or os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex)[
    :12
]
_HOLDER = f"{PREFIX}_run_{RUN}"
# Any constant: the template is made and dropped by one process of the run at a time.
_LOCK_KEY = 0x7465_7374_5F74_706C


def _orphaned(conn: psycopg.Connection) -> list[str]:
    """This suite's databases whose run has no process left holding it."""
    rows = conn.execute(
        """
        SELECT d.datname FROM pg_database d
        WHERE d.datname LIKE %(prefix)s || '\\_%%'
          AND NOT EXISTS (
            SELECT 1 FROM pg_stat_activity a
            WHERE a.application_name = %(prefix)s || '_run_' || split_part(d.datname, '_', 3)
          )
        """,
        {"prefix": PREFIX},
    )
    return [name for (name,) in rows]


def _drop(conn: psycopg.Connection, name: str) -> None:
    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class Template:
    """The run's migrated template on `server_url`, held while this process uses it."""

    def __init__(self, server_url: str):
        self.server_url = server_url
        self.name = f"{PREFIX}_{RUN}_template"
        self._holder = psycopg.connect(make_conninfo(server_url, application_name=_HOLDER), autocommit=True)
        self._holder.execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
        try:
            made = self._holder.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self.name])
            if made.fetchone() is None:
                for name in _orphaned(self._holder):
                    _drop(self._holder, name)
                self._make()
        finally:
            self._holder.execute("SELECT pg_advisory_unlock(%s)", [_LOCK_KEY])

    def _make(self) -> None:
        self._holder.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        try:
            migrate.migrate(self.url(self.name))
        except BaseException:
            _drop(self._holder, self.name)
            raise

    def url(self, database: str) -> str:
        return make_conninfo(self.server_url, dbname=database)

    @contextlib.contextmanager
    def copy(self) -> Iterator[str]:
        """A migrated database of the caller's own: its URL, dropped after."""
        name = f"{PREFIX}_{RUN}_{uuid.uuid4().hex[:12]}"
        self._holder.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(self.name))
        )
        try:
            yield self.url(name)
        finally:
            # FORCE: a connection a test left open (a pool it did not close) must not keep it.
            _drop(self._holder, name)

    def release(self) -> None:
        """Stop holding the run's databases; the last process of the run drops them."""
        with self._holder as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
            others = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
                [_HOLDER],
            ).fetchone()
            if others is None:
                for name in _orphaned(conn) + [self.name]:
                    _drop(conn, name)
            # Closing the connection ends the lock too, after the drops.
