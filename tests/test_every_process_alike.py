"""Every process judges an event alike: the web app, `backfill`, `events reprocess` and the worker.

Each path runs here as the real command in its own process, as the Procfile
and an operator run it. In this test process the web app is imported (by
conftest) and the handlers it registers would hide a command that forgot
to load them; a subprocess starts from nothing, as a shell does.
"""

import json
import subprocess

import pytest
import requests

from tests import conftest
from tests.domains.stripe.test_thin_fetch import WORKER_ENV, thin_event
from tests.support import commands, shopify
from tests.support.downstream import Downstream, Worker, wait_until
from tests.support.rows import count_rows
from tests.support.stripe_api import api_env, stand_in  # noqa: F401  (fixture)
from webhooks.traffic import samples

MARKER = {"WEBHOOK_ORDER_MARKER_KEY": "shop_order"}

_FAILURE = """
INSERT INTO webhook_failures (provider, event_id, event_type, error_class, error_message, payload)
VALUES ('stripe', %s, %s, 'OperationalError', 'connection lost', %s)
"""


def command(database_url: str, *argv: str, **env) -> subprocess.CompletedProcess:
    """`python -m webhooks ARGV` as its own process, with the service's settings and `env`."""
    return commands.command(*argv, **conftest.service_env(database_url, **env))


def marked_payment() -> dict:
    """A PaymentIntent the shop created outside Checkout, marked by the shop's own metadata key."""
    evt = samples.payment_events()[1]
    evt["data"]["object"]["metadata"] = {"shop_order": "A-17"}
    return evt


def outcome(db, event_id: str) -> str | None:
    row = db.execute("SELECT outcome FROM webhook_events WHERE event_id = %s", [event_id]).fetchone()
    return row and row[0]


def fulfilled(db, payment_id: str) -> int:
    return count_rows(db, "fulfilments", "payment_id = %s", [payment_id])


def deliver_live(gunicorn, database_url, db, stand_in) -> dict:
    server = gunicorn(WEB_CONCURRENCY=1, **MARKER)
    evt = marked_payment()
    body = samples.encode(evt)
    answer = requests.post(
        server.url + "/webhooks/stripe", data=body, headers=conftest.signed_headers(body), timeout=30
    )
    assert answer.status_code == 200, answer.text
    return evt


def backfill(gunicorn, database_url, db, stand_in) -> dict:
    evt = marked_payment()
    stand_in.add("events", evt)
    done = command(database_url, "backfill", "--since", "72h", **MARKER, **api_env(stand_in))
    assert done.returncode == 0, done.stdout + done.stderr
    return evt


def reprocess(gunicorn, database_url, db, stand_in) -> dict:
    """A delivery whose attempt failed (the database went away) is re-run from its stored body."""
    evt = marked_payment()
    db.execute(_FAILURE, [evt["id"], evt["type"], samples.encode(evt).decode()])
    done = command(database_url, "events", "reprocess", evt["id"], **MARKER)
    assert done.returncode == 0, done.stdout + done.stderr
    return evt


def thin_fetch(gunicorn, database_url, db, stand_in) -> dict:
    """A thin event's object, fetched and applied by the outbox worker."""
    server = gunicorn(WEB_CONCURRENCY=1, **MARKER, **api_env(stand_in))
    intent = marked_payment()["data"]["object"]
    stand_in.add("payment_intents", intent)
    thin = thin_event(intent)
    body = json.dumps(thin).encode()
    answer = requests.post(
        server.url + "/webhooks/stripe", data=body, headers=conftest.signed_headers(body), timeout=30
    )
    assert answer.json()["outcome"] == "fetch_queued"
    receiver = Downstream()
    worker = Worker(
        conftest.service_env(
            database_url, WEBHOOK_OUTBOX_URL=receiver.url, **MARKER, **api_env(stand_in, **WORKER_ENV)
        )
    )
    fetched = {"id": thin["id"] + ":fetched", "data": {"object": intent}}
    try:
        wait_until(lambda: outcome(db, fetched["id"]), 30, "the fetched event's claim")
    finally:
        worker.stop()
        receiver.close()
    return fetched


@pytest.mark.parametrize("way", [deliver_live, backfill, reprocess, thin_fetch], ids=lambda way: way.__name__)
def test_a_payment_intent_with_the_shops_order_marker_ships_however_it_arrives(
    gunicorn, database_url, db, stand_in, way
):
    evt = way(gunicorn, database_url, db, stand_in)
    assert outcome(db, evt["id"]) == "fulfilled"
    assert fulfilled(db, evt["data"]["object"]["id"]) == 1


def test_reprocess_runs_shopifys_handlers_on_a_failed_shopify_event(database_url, db, make_app):
    """An orders/paid that failed (its table was being migrated) is shipped by `events reprocess`."""
    client = make_app(SHOPIFY_WEBHOOK_SECRET=shopify.SHOPIFY_SECRET).test_client()
    order, event_id = shopify.order(), "f5a9c0de-7d1e-4bb7-9d6c-8a1d2f3e4b5c"
    db.execute("ALTER TABLE shopify_fulfilments RENAME TO shopify_fulfilments_moved")
    assert shopify.post(client, "orders/paid", order, event_id).status_code == 500
    db.execute("ALTER TABLE shopify_fulfilments_moved RENAME TO shopify_fulfilments")

    done = command(database_url, "events", "reprocess", event_id, "--provider", "shopify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == f'200 {{"event_id":"{event_id}","outcome":"fulfilled"}}'
    shipped = db.execute("SELECT shop, order_id FROM shopify_fulfilments").fetchall()
    assert shipped == [(shopify.SHOP, order["id"])]


def test_a_shop_module_can_wrap_a_built_in_handler_and_keep_its_effect(make_app, db):
    db.execute("CREATE TABLE receipts (session_id text PRIMARY KEY)")
    app = make_app(WEBHOOK_HANDLER_MODULES="tests.support.handlers,tests.support.wrapping_handlers")
    session = samples.payment_events()[0]
    response = conftest.post_event(app.test_client(), session)
    assert response.get_json()["outcome"] == "fulfilled"
    assert db.execute("SELECT session_id FROM receipts").fetchall() == [(session["data"]["object"]["id"],)]
    assert fulfilled(db, session["data"]["object"]["payment_intent"]) == 1
