"""The suite's databases (tests/support/databases.py): a copy a test only wrote rows in is handed
on clean, under a new name; one whose catalog or seeded rows it changed is dropped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import pytest

from tests.support import databases
from webhooks.infra import migrate


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {
            name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }


@contextlib.contextmanager
def _copy_after(template: databases.Template, used_by) -> Iterator[str]:
    """The URL of the next test's copy, after `used_by(url)` used one."""
    with template.copy() as url:
        used_by(url)
    with template.copy() as url:
        yield url


def test_a_copy_whose_test_wrote_rows_is_handed_on_empty_with_its_sequences_unread(template):
    def fulfil(url: str) -> None:
        with psycopg.connect(url) as conn:
            conn.execute(
                "INSERT INTO webhook_events (provider, event_id, event_type, account, status)"
                " VALUES ('stripe', 'evt_used', 'payment_intent.succeeded', '', 'processing')"
            )
            conn.execute(
                "INSERT INTO fulfilments (payment_id, provider, event_id, event_type)"
                " VALUES ('pi_used', 'stripe', 'evt_used', 'payment_intent.succeeded')"
            )

    with _copy_after(template, fulfil) as url, psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM webhook_events").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM fulfilments").fetchone() == (0,)
        [(last,)] = conn.execute(
            "SELECT last_value FROM pg_sequences WHERE sequencename = 'webhook_events_id_seq'"
        ).fetchall()
        assert last is None


def test_a_connection_a_test_left_open_cannot_reach_the_next_tests_copy(template):
    with template.copy() as url:
        left_open = psycopg.connect(url, autocommit=True)
    with pytest.raises(psycopg.OperationalError):
        left_open.execute("SELECT 1")
    # Nor can it come back: the copy the next test gets has another name.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url).close()


def test_a_copy_whose_catalog_changed_is_dropped_not_handed_on(template):
    def add_a_table(url: str) -> None:
        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE left_behind (id int)")

    def tighten_a_column_and_grant(url: str) -> None:
        with psycopg.connect(url) as conn:
            conn.execute("ALTER TABLE fulfilments ALTER COLUMN amount SET NOT NULL")
            conn.execute("GRANT SELECT ON fulfilments TO PUBLIC")

    with _copy_after(template, add_a_table) as url:
        assert "left_behind" not in _tables(url)
    with _copy_after(template, tighten_a_column_and_grant) as url, psycopg.connect(url) as conn:
        assert conn.execute(
            "SELECT attnotnull FROM pg_attribute"
            " WHERE attrelid = 'fulfilments'::regclass AND attname = 'amount'"
        ).fetchone() == (False,)
        assert conn.execute("SELECT relacl FROM pg_class WHERE oid = 'fulfilments'::regclass").fetchone() == (
            None,
        )


def test_a_copy_whose_seeded_rows_changed_is_dropped_not_handed_on(template):
    def forget_the_migrations(url: str) -> None:
        with psycopg.connect(url) as conn:
            conn.execute("DELETE FROM schema_migrations")

    with _copy_after(template, forget_the_migrations) as url, psycopg.connect(url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM schema_migrations").fetchone()
    assert count == len(migrate.available())
