"""migrations/0044: a ledger of a million rows split into narrow claims and monthly payloads, and back.

While it runs, claims go on in the old shape: each one committed before the
migration's lock has its payload afterwards. The ledger's answers (status,
outcome, stored answer) are the same after the trip there and after the trip back.
"""

import threading
from pathlib import Path

import psycopg
import pytest

from tests.conftest import migrated_before
from webhooks.infra import migrate

ROWS = 1_000_000
DOWN = migrate.MIGRATIONS_DIR / "down"

# A year of rows, a Stripe-like id and a payload each; one in ten still processing.
_FILL = """
INSERT INTO webhook_events
    (provider, event_id, event_type, account, payload, status, outcome, response_status,
     response_body, received_at, completed_at)
SELECT 'stripe', 'evt_' || g, 'payment_intent.succeeded', '',
       '{"id":"evt_' || g || '","object":"event","data":{"object":{"amount":' || g || '}}}',
       CASE WHEN g %% 10 = 0 THEN 'processing' ELSE 'completed' END,
       CASE WHEN g %% 10 = 0 THEN NULL ELSE 'fulfilled' END,
       CASE WHEN g %% 10 = 0 THEN NULL ELSE 200 END,
       CASE WHEN g %% 10 = 0 THEN NULL ELSE webhooks_answer_body('evt_' || g, 'fulfilled') END,
       now() - make_interval(secs => (%(rows)s - g) * 31.5),
       CASE WHEN g %% 10 = 0 THEN NULL ELSE now() END
FROM generate_series(1, %(rows)s) AS g
"""
_ANSWERS = """
SELECT count(*), md5(string_agg(concat_ws('|', id, provider, event_id, status, outcome, response_status,
                                         response_body, received_at), ',' ORDER BY id))
FROM webhook_events
"""
_PAYLOADS_NOW = """
SELECT count(*), md5(string_agg(p.payload, ',' ORDER BY e.id))
FROM webhook_events e JOIN webhook_payloads p ON p.ledger_id = e.id AND p.received_at = e.received_at
"""
_PAYLOADS_BEFORE = "SELECT count(*), md5(string_agg(payload, ',' ORDER BY id)) FROM webhook_events"


def _answer_body_function(conn: psycopg.Connection) -> None:
    # The rule file's definition, which a partial history does not apply.
    conn.execute("""CREATE OR REPLACE FUNCTION webhooks_answer_body(p_event_id text, p_outcome text)
        RETURNS text LANGUAGE sql IMMUTABLE AS $$
        SELECT format('{"event_id":%s,"outcome":%s}', to_json(p_event_id), to_json(p_outcome)) $$""")


class _OldClaims(threading.Thread):
    """Claims as a service of before 0044 writes them, until the column is gone."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.claimed, self.started = url, [], threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            for n in range(10**9):
                try:
                    conn.execute(
                        "INSERT INTO webhook_events (provider, event_id, event_type, payload)"
                        " VALUES ('stripe', %s, 'charge.succeeded', %s)",
                        [f"evt_during_{n}", f'{{"n":{n}}}'],
                    )
                except psycopg.errors.UndefinedColumn:
                    return
                self.claimed.append(f"evt_during_{n}")
                self.started.set()


# A million rows keep a core busy for most of a minute: the system pass's, beside tests that wait.
@pytest.mark.system
@pytest.mark.long
def test_a_million_rows_there_and_back_with_claims_going_on_and_the_answers_intact(
    server_url, tmp_path: Path
):
    with migrated_before(server_url, "0044", tmp_path) as url, psycopg.connect(url, autocommit=True) as conn:
        _answer_body_function(conn)
        conn.execute(_FILL, {"rows": ROWS})
        answers = conn.execute(_ANSWERS).fetchone()
        payloads = conn.execute(_PAYLOADS_BEFORE).fetchone()
        assert answers[0] == payloads[0] == ROWS

        claims = _OldClaims(url)
        claims.start()
        assert claims.started.wait(30)
        assert "0044_payloads_in_monthly_partitions" in migrate.migrate(url)
        claims.join(60)

        during = conn.execute(
            "SELECT count(*) FROM webhook_events e JOIN webhook_payloads p"
            " ON p.ledger_id = e.id AND p.received_at = e.received_at WHERE e.event_id = ANY(%s)",
            [claims.claimed],
        ).fetchone()[0]
        assert claims.claimed and during == len(claims.claimed)
        conn.execute("DELETE FROM webhook_payloads WHERE ledger_id > %s", [ROWS])
        conn.execute("DELETE FROM webhook_events WHERE id > %s", [ROWS])
        assert conn.execute(_ANSWERS).fetchone() == answers
        assert conn.execute(_PAYLOADS_NOW).fetchone() == payloads
        assert (
            conn.execute(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_payloads'::regclass"
            ).fetchone()[0]
            >= 13
        )

        for down in sorted(DOWN.glob("*.sql"), reverse=True):
            conn.execute(down.read_text())
        assert conn.execute(_ANSWERS).fetchone() == answers
        assert conn.execute(_PAYLOADS_BEFORE).fetchone() == payloads
        assert conn.execute("SELECT to_regclass('webhook_payloads')").fetchone()[0] is None
