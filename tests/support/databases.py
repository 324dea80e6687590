"""A database per test, copied from one migrated template per run.

Migrating replays every migration and rule file: done once per run into a
template database, each test gets a `CREATE DATABASE ... TEMPLATE` copy of
it (a copy is cheaper than a replay, and a test may change its schema
without touching another test's). tests/infra/test_schema.py still compares
a fresh migrate with schema.sql, and the tests of migrating itself replay the
history (conftest.migrated_schema).

A copy is handed on rather than dropped when its test only wrote rows: its
rows are deleted and its sequences set back, and it is renamed, so that
nothing of the test that had it (a pool it left open) reaches the next. A
copy is ten times the server's CPU of that clean-up, and the suite makes one
for most tests. One whose catalog (tables, columns, indexes, triggers,
functions, grants, settings) or seeded rows changed, or that grew big, is
dropped instead, as is any copy where the test role is no superuser (the
clean-up deletes past foreign keys and triggers, as a replica does).

Every process of a run (the xdist workers) holds one idle connection named
for the run while it uses the template. The first to need the template makes
it, the last to finish drops it, and whoever makes one drops the databases of
runs that no process holds any more (a run that was killed).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

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


# Every user object of the database and what a test could change of it; rows and
# sequences are compared apart. OIDs are the template's in every copy.
_CATALOG = """
SELECT md5(string_agg(f, E'\\n' ORDER BY f)) FROM (
    SELECT format('class %s %s %s %s %s %s', oid, relname, relkind, relnamespace, relacl, reloptions)
    FROM pg_class WHERE oid >= 16384
    UNION ALL SELECT format('column %s %s %s %s %s %s', attrelid, attname, atttypid, attnotnull,
                            atthasdef, attisdropped)
    FROM pg_attribute WHERE attrelid >= 16384
    UNION ALL SELECT format('default %s %s', oid, md5(adbin::text)) FROM pg_attrdef
    UNION ALL SELECT format('index %s %s', indexrelid, indisvalid) FROM pg_index WHERE indexrelid >= 16384
    UNION ALL SELECT format('constraint %s %s', oid, convalidated) FROM pg_constraint WHERE oid >= 16384
    UNION ALL SELECT format('trigger %s %s', oid, tgenabled) FROM pg_trigger
    UNION ALL SELECT format('rule %s %s', oid, ev_enabled) FROM pg_rewrite WHERE oid >= 16384
    UNION ALL SELECT format('function %s %s %s', oid, md5(prosrc), proconfig) FROM pg_proc WHERE oid >= 16384
    UNION ALL SELECT format('type %s', oid) FROM pg_type WHERE oid >= 16384
    UNION ALL SELECT format('schema %s %s', oid, nspacl) FROM pg_namespace WHERE oid >= 16384
    UNION ALL SELECT format('comment %s %s', objoid, md5(description))
    FROM pg_description WHERE objoid >= 16384
    UNION ALL SELECT format('policy %s', oid) FROM pg_policy
    UNION ALL SELECT format('extension %s', oid) FROM pg_extension
    UNION ALL SELECT format('event trigger %s', oid) FROM pg_event_trigger
    UNION ALL SELECT format('large object %s', oid) FROM pg_largeobject_metadata
    UNION ALL SELECT format('setting %s', setconfig) FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
) AS catalog(f)
"""
_TABLES = """
SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'
ORDER BY 1
"""
_SEQUENCES = "SELECT format('%I.%I', schemaname, sequencename), last_value, start_value FROM pg_sequences"
# Bigger than this, a test's rows cost more to delete than a new copy.
_CLEANED_UP_TO_BYTES = 8 << 20


def _filled(conn: psycopg.Connection, tables: list[str]) -> list[bool]:
    """Whether each table has a row, in one statement."""
    if not tables:
        return []
    exists = sql.SQL(", ").join(sql.SQL("EXISTS (SELECT FROM {})").format(sql.SQL(t)) for t in tables)
    return list(conn.execute(sql.SQL("SELECT {}").format(exists)).fetchone())


def _rows(conn: psycopg.Connection, table: str) -> str:
    return conn.execute(
        sql.SQL("SELECT md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) FROM {} t").format(
            sql.SQL(table)
        )
    ).fetchone()[0]


@dataclass(frozen=True)
class _Pristine:
    """A fresh copy, as the clean-up must leave one: its catalog, its seeded tables' rows, its
    empty tables and its sequences."""

    catalog: str
    seeded: dict[str, str]
    empty: list[str]
    sequences: dict[str, tuple[int | None, int]]

    @classmethod
    def read(cls, conn: psycopg.Connection) -> _Pristine:
        tables = [table for (table,) in conn.execute(_TABLES)]
        filled = _filled(conn, tables)
        return cls(
            catalog=conn.execute(_CATALOG).fetchone()[0],
            seeded={t: _rows(conn, t) for t, full in zip(tables, filled, strict=True) if full},
            empty=[t for t, full in zip(tables, filled, strict=True) if not full],
            sequences={name: (last, start) for name, last, start in conn.execute(_SEQUENCES)},
        )

    def restore(self, conn: psycopg.Connection) -> bool:
        """Back to pristine, in one transaction; False where only a new copy would be."""
        with conn.transaction():
            if conn.execute(_CATALOG).fetchone()[0] != self.catalog:
                return False
            if any(_rows(conn, table) != rows for table, rows in self.seeded.items()):
                return False
            written = [t for t, full in zip(self.empty, _filled(conn, self.empty), strict=True) if full]
            if written:
                size = conn.execute(
                    "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t", [written]
                ).fetchone()[0]
                if size > _CLEANED_UP_TO_BYTES:
                    return False
                # As a replica applies rows: past foreign keys and the tables' own triggers.
                conn.execute("SET LOCAL session_replication_role = replica")
                for table in written:
                    conn.execute(sql.SQL("DELETE FROM {}").format(sql.SQL(table)))
            for name, last, _ in conn.execute(_SEQUENCES).fetchall():
                was, start = self.sequences[name]
                if last != was:
                    # Unread, as in the template, where it was unread there.
                    conn.execute(
                        "SELECT setval(%s, %s, %s)", [name, start if was is None else was, was is not None]
                    )
        return True


_SUPERUSER = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
_RENAME_TRIES = 50
_RENAME_WAIT_S = 0.01


def _copy_name() -> str:
    return f"{PREFIX}_{RUN}_{uuid.uuid4().hex[:12]}"


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
        self._free: list[str] = []  # cleaned-up copies, for the next tests of this process
        # Read off this process's first copy; never where the role cannot clean one up.
        self._pristine: _Pristine | None = None
        self._cleans_up = bool(self._holder.execute(_SUPERUSER).fetchone()[0])
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
        """A migrated database of the caller's own: its URL, cleaned up or dropped after."""
        name = self._free.pop() if self._free else self._new_copy()
        try:
            yield self.url(name)
        finally:
            self._hand_on(name)

    def _new_copy(self) -> str:
        name = _copy_name()
        self._holder.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(self.name))
        )
        if self._pristine is None and self._cleans_up:
            with psycopg.connect(self.url(name)) as conn:
                self._pristine = _Pristine.read(conn)
        return name

    def _hand_on(self, name: str) -> None:
        """Clean a used copy up for the next test, or drop it."""
        renamed = self._renamed(name) if self._pristine is not None else None
        if renamed is None:
            # FORCE: a connection a test left open (a pool it did not close) must not keep it.
            _drop(self._holder, name)
            return
        with psycopg.connect(self.url(renamed)) as conn:
            restored = self._pristine.restore(conn)
        if restored:
            self._free.append(renamed)
        else:
            _drop(self._holder, renamed)

    def _renamed(self, name: str) -> str | None:
        """The copy under a new name, no session left on it; None if sessions kept coming back."""
        renamed = _copy_name()
        rename = sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
            sql.Identifier(name), sql.Identifier(renamed)
        )
        for _ in range(_RENAME_TRIES):
            self._holder.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
            )
            try:
                self._holder.execute(rename)
            except psycopg.errors.ObjectInUse:
                # A terminated session is gone only once its backend has exited.
                time.sleep(_RENAME_WAIT_S)
                continue
            return renamed
        return None

    def release(self) -> None:
        """Stop holding the run's databases; the last process of the run drops them."""
        with self._holder as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", [_LOCK_KEY])
            others = conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
                [_HOLDER],
            ).fetchone()
            for name in self._free:
                _drop(conn, name)
            if others is None:
                for name in _orphaned(conn) + [self.name]:
                    _drop(conn, name)
            # Closing the connection ends the lock too, after the drops.
