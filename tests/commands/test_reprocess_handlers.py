"""`events reprocess` runs an event with the server's handler for its type, or refuses.

The server and the command are separate processes with their own
WEBHOOK_HANDLER_MODULES: a command run from a shell without the variable
must not close a failed event as `ignored`, nor run a built-in handler the
server had replaced.
"""

import requests

from tests.conftest import scripted_event, signed_headers, table_counts
from tests.support.commands import command
from webhooks.traffic import samples


def deliver(server, evt: dict) -> int:
    body = samples.encode(evt)
    return requests.post(
        server.url + "/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30
    ).status_code


def reprocess(database_url: str, event_id: str, *flags: str, modules: str = ""):
    return command(
        "events", "reprocess", event_id, *flags, DATABASE_URL=database_url, WEBHOOK_HANDLER_MODULES=modules
    )


def ledger_status(db, event_id: str) -> str | None:
    row = db.execute("SELECT outcome FROM webhook_events WHERE event_id = %s", [event_id]).fetchone()
    return row and row[0]


def test_an_event_whose_handler_is_not_loaded_here_is_refused_not_closed_as_ignored(
    gunicorn, database_url, db
):
    server = gunicorn(WEB_CONCURRENCY=1)  # WEBHOOK_HANDLER_MODULES=tests.support.handlers
    evt = scripted_event(fail_attempts=2, payment_id="pi_needs_its_handler")
    assert [deliver(server, evt) for _ in range(2)] == [500, 500]

    refused = reprocess(database_url, evt["id"])
    assert refused.returncode == 2
    assert refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"refused to reprocess {evt['id']}: no handler for test.scripted")
    assert "tests.support.handlers.scripted" in line and "--allow-ignored" in line
    assert ledger_status(db, evt["id"]) is None  # still failed: the provider's retry can run it

    done = reprocess(database_url, evt["id"], modules="tests.support.handlers")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f'200 {{"event_id":"{evt["id"]}","outcome":"fulfilled"}}'
    assert table_counts(db)["fulfilments"] == 1


def test_allow_ignored_closes_an_event_without_a_handler_on_purpose(gunicorn, database_url, db):
    server = gunicorn(WEB_CONCURRENCY=1)
    evt = scripted_event(fail_attempts=9)
    assert deliver(server, evt) == 500
    closed = reprocess(database_url, evt["id"], "--allow-ignored")
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout.splitlines()[-1].endswith('"outcome":"ignored"}')
    assert ledger_status(db, evt["id"]) == "ignored"


def test_a_replaced_built_in_handler_is_not_swapped_back_in(gunicorn, database_url, db):
    server = gunicorn(
        WEB_CONCURRENCY=1, WEBHOOK_HANDLER_MODULES="tests.support.handlers,tests.support.replacement_handlers"
    )
    evt = samples.payment_events()[1]
    evt["data"]["object"]["metadata"] = {"receipt_down": "yes"}
    assert evt["type"] == "payment_intent.succeeded" and deliver(server, evt) == 500

    refused = reprocess(database_url, evt["id"], "--allow-ignored")  # no escape hatch for this
    assert refused.returncode == 2
    assert "its last attempt ran tests.support.replacement_handlers.fulfil_and_send_receipt" in refused.stderr
    assert "this process would run webhooks.domains.stripe." in refused.stderr
    assert ledger_status(db, evt["id"]) is None and table_counts(db)["fulfilments"] == 0


def test_a_completed_event_replays_its_answer_whatever_this_process_loads(gunicorn, database_url):
    server = gunicorn(WEB_CONCURRENCY=1)
    evt = scripted_event()
    assert deliver(server, evt) == 200
    replayed = reprocess(database_url, evt["id"])
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines()[-1].endswith(
        '"outcome":"scripted"} (already completed: stored answer)'
    )
