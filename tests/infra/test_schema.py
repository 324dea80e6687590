"""schema.sql is the schema the migrations and rule files make (webhooks/infra/schema.py).

It needs PostgreSQL 15's pg_dump and a PostgreSQL 15 server: without them
the tests skip, and fail under WEBHOOKS_REQUIRE_PG_DUMP (as in CI).
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.support import machine
from webhooks.commands import main
from webhooks.infra import migrate, schema

ROOT = Path(__file__).resolve().parents[2]


def _made(server_url: str, directory: Path = migrate.MIGRATIONS_DIR) -> str:
    try:
        return schema.made_by_migrate(server_url, directory)
    except schema.Unavailable as exc:
        machine.lacking("WEBHOOKS_REQUIRE_PG_DUMP", str(exc))


def _regenerate(server_url: str) -> str:
    # The URL only where the tests chose it: a DATABASE_URL may hold a password.
    prefix = "" if os.environ.get("DATABASE_URL") else f"DATABASE_URL={server_url} "
    return f"{prefix}python -m webhooks db schema"


def test_schema_sql_is_what_a_fresh_migrate_makes(server_url):
    made = _made(server_url)
    committed = schema.FILE.read_text() if schema.FILE.exists() else ""
    if made != committed:
        pytest.fail(
            f"schema.sql is not the schema the migrations make: run `{_regenerate(server_url)}`"
            f" and commit schema.sql\n{schema.difference(committed, made)}",
            pytrace=False,
        )


def test_db_schema_writes_what_the_test_compares_against(server_url, tmp_path, monkeypatch, capsys):
    made = _made(server_url)
    monkeypatch.setenv("DATABASE_URL", server_url)
    monkeypatch.setattr(schema, "FILE", tmp_path / "schema.sql")
    assert main(["db", "schema"]) == 0
    assert (tmp_path / "schema.sql").read_text() == made
    assert main(["db", "schema"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("schema.sql is current")


def test_a_migration_the_file_lacks_shows_as_a_short_diff(server_url, tmp_path):
    for path in migrate.available():
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "9999_extra.sql").write_text(
        "CREATE TABLE extra (id bigint PRIMARY KEY);\nCREATE INDEX extra_idx ON extra (id);\n"
    )
    diff = schema.difference(schema.FILE.read_text(), _made(server_url, tmp_path), limit=12)
    assert "+CREATE TABLE extra (" in diff
    assert len(diff.splitlines()) == 13 and diff.splitlines()[-1].endswith("more lines")


def test_the_dump_keeps_no_trace_of_the_schema_it_was_taken_from():
    raw = (
        "--\n-- PostgreSQL database dump\n--\n\n\\restrict KEY\n\n"
        "-- Dumped from database version 15.20\n\nSET statement_timeout = 0;\n"
        "SELECT pg_catalog.set_config('search_path', '', false);\n\n"
        "--\n-- Name: scratch_1; Type: SCHEMA; Schema: -; Owner: -\n--\n\nCREATE SCHEMA scratch_1;\n\n\n"
        "--\n-- Name: f(); Type: FUNCTION; Schema: scratch_1; Owner: -\n--\n\n"
        "CREATE FUNCTION scratch_1.f() RETURNS integer\n    LANGUAGE sql\n    AS $$ SELECT 1 $$;\n\n\n"
        "SET default_tablespace = '';\n\nSET default_table_access_method = heap;\n\n"
        "--\n-- Name: t; Type: TABLE; Schema: scratch_1; Owner: -\n--\n\n"
        "CREATE TABLE scratch_1.t (\n    id bigint DEFAULT nextval('scratch_1.t_id_seq'::regclass)\n);\n\n\n"
        "--\n-- PostgreSQL database dump complete\n--\n\n\\unrestrict KEY\n\n"
    )
    body = schema.normalised(raw, "scratch_1").split("\n\n", 1)[1]
    assert body == (
        "-- FUNCTION: f()\nCREATE FUNCTION f() RETURNS integer\n    LANGUAGE sql\n    AS $$ SELECT 1 $$;\n\n"
        "-- TABLE: t\nCREATE TABLE t (\n    id bigint DEFAULT nextval('t_id_seq'::regclass)\n);\n"
    )


def test_ci_fails_rather_than_skips_without_pg_dump():
    assert "WEBHOOKS_REQUIRE_PG_DUMP=1" in (ROOT / ".ci" / "run").read_text()
