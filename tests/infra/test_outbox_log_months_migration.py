"""migrations/0046: the outbox's log made monthly partitions while pgqueuer goes on logging, and back.

The rows, the ids and the roll-up's marks are the same after the trip there
and after the trip back; each row logged while it ran is kept, a roll-up
committed after its copy is not counted again, and the ids go on from where
the old table's left off.
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

from tests.conftest import migrated_before
from tests.support.downstream import wait_until
from webhooks.infra import migrate

ROWS = 3000
DOWN = migrate.MIGRATIONS_DIR / "down" / "0046_outbox_log_in_monthly_partitions.sql"

# A year and more of log rows, a few with a traceback, half of them rolled up.
_FILL = """
INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, traceback, aggregated, created)
SELECT g / 3, (ARRAY['queued', 'picked', 'successful'])[g %% 3 + 1]::pgqueuer_status, 'webhooks.outbox', 0,
       CASE WHEN g %% 100 = 0 THEN jsonb_build_object('exception_message', 'HTTP 500 #' || g) END,
       g %% 2 = 0, now() - make_interval(hours => (%(rows)s - g) * 3)
FROM generate_series(1, %(rows)s) AS g
"""
_LOG = """
SELECT count(*), md5(string_agg(concat_ws('|', id, created, job_id, status, priority, entrypoint, traceback,
                                         aggregated), ',' ORDER BY id))
FROM pgqueuer_log
"""
_LOG_ONE = """
INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority) VALUES (%s, 'queued', 'w', 0) RETURNING id
"""
_MONTHS = """
SELECT c.relname, c.reloptions FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'pgqueuer_log'::regclass ORDER BY c.relname
"""
# pgqueuer's roll-up into its statistics, of the filled rows alone.
_ROLL_UP = "UPDATE pgqueuer_log SET aggregated = true WHERE NOT aggregated AND id <= %s"
_WAITING = """
SELECT count(*) FROM pg_locks
WHERE relation = 'pgqueuer_log'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted
"""
_LEFT_BEHIND = """
SELECT relname FROM pg_class
WHERE relname LIKE '%%by\\_month%%' AND relnamespace = current_schema()::regnamespace
"""


class _Logging(threading.Thread):
    """pgqueuer's writes to its log, one row at a time, until stopped: their ids in order."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.ids, self.started, self.stop = url, [], threading.Event(), threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                self.ids.append(conn.execute(_LOG_ONE, [len(self.ids)]).fetchone()[0])
                self.started.set()


def test_the_log_goes_to_months_while_rows_are_logged_and_comes_back_with_its_rows_and_ids(
    server_url, tmp_path: Path
):
    with (
        migrated_before(server_url, "0046", tmp_path) as url,
        psycopg.connect(url, autocommit=True) as conn,
        psycopg.connect(url) as held,
        ThreadPoolExecutor(1) as pool,
    ):
        conn.execute(_FILL, {"rows": ROWS})
        (last_id,) = conn.execute("SELECT max(id) FROM pgqueuer_log").fetchone()
        with conn.transaction(force_rollback=True):
            conn.execute(_ROLL_UP, [last_id])
            rolled_up = conn.execute(_LOG).fetchone()

        # A transaction in flight as the migration begins: it commits its row
        # and a roll-up of every filled row after the copy, while the migration waits for its lock.
        (held_id,) = held.execute(_LOG_ONE, [-1]).fetchone()
        logging = _Logging(url)
        logging.start()
        assert logging.started.wait(30)
        migrating = pool.submit(migrate.migrate, url)
        wait_until(lambda: conn.execute(_WAITING).fetchone()[0], 60, "the migration to wait for its lock")
        held.execute(_ROLL_UP, [last_id])
        held.commit()
        assert "0046_outbox_log_in_monthly_partitions" in migrating.result(60)
        logging.stop.set()
        logging.join(30)

        ids = [held_id, *logging.ids]
        kept = conn.execute("SELECT count(*) FROM pgqueuer_log WHERE id = ANY(%s)", [ids]).fetchone()[0]
        assert kept == len(ids) and logging.ids == sorted(set(logging.ids))
        assert min(ids) > last_id
        months = conn.execute(_MONTHS).fetchall()
        assert len(months) >= 13 and all(name.startswith("pgqueuer_log_p") for name, _ in months)
        assert all("autovacuum_vacuum_scale_factor=0.02" in options for _, options in months)
        assert conn.execute(_LEFT_BEHIND).fetchall() == []
        (after,) = conn.execute(_LOG_ONE, [0]).fetchone()
        assert after > max(ids)

        conn.execute("DELETE FROM pgqueuer_log WHERE id > %s", [last_id])
        assert conn.execute(_LOG).fetchone() == rolled_up

        conn.execute(DOWN.read_text())
        assert conn.execute(_LOG).fetchone() == rolled_up
        relkind = conn.execute("SELECT relkind FROM pg_class WHERE oid = 'pgqueuer_log'::regclass").fetchone()
        assert relkind == ("r",)
        assert conn.execute(_LOG_ONE, [0]).fetchone()[0] > after
