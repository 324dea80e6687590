"""migrations/0046: the outbox's log made monthly partitions while pgqueuer goes on logging, and back.

The rows, the ids and the roll-up's marks are the same after the trip there
and after the trip back; each row logged while it ran is kept, and the ids
go on from where the old table's left off.
"""

import threading
from pathlib import Path

import psycopg

from tests.conftest import migrated_before
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
    with migrated_before(server_url, "0046", tmp_path) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_FILL, {"rows": ROWS})
        filled = conn.execute(_LOG).fetchone()
        (last_id,) = conn.execute("SELECT max(id) FROM pgqueuer_log").fetchone()

        logging = _Logging(url)
        logging.start()
        assert logging.started.wait(30)
        assert "0046_outbox_log_in_monthly_partitions" in migrate.migrate(url)
        logging.stop.set()
        logging.join(30)

        kept = conn.execute("SELECT count(*) FROM pgqueuer_log WHERE id = ANY(%s)", [logging.ids]).fetchone()[
            0
        ]
        assert kept == len(logging.ids) and logging.ids == sorted(set(logging.ids))
        assert logging.ids[0] > last_id
        months = conn.execute(_MONTHS).fetchall()
        assert len(months) >= 13 and all(name.startswith("pgqueuer_log_p") for name, _ in months)
        assert all("autovacuum_vacuum_scale_factor=0.02" in options for _, options in months)
        assert conn.execute(_LEFT_BEHIND).fetchall() == []
        (after,) = conn.execute(_LOG_ONE, [0]).fetchone()
        assert after > logging.ids[-1]

        conn.execute("DELETE FROM pgqueuer_log WHERE id > %s", [last_id])
        assert conn.execute(_LOG).fetchone() == filled

        conn.execute(DOWN.read_text())
        assert conn.execute(_LOG).fetchone() == filled
        assert conn.execute(
            "SELECT relkind FROM pg_class WHERE oid = 'pgqueuer_log'::regclass"
        ).fetchone() == ("r",)
        assert conn.execute(_LOG_ONE, [0]).fetchone()[0] > after
