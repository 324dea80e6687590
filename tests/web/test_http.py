"""The HTTP contract around the ledger: body limits, malformed events, health."""

import json

import pytest

from tests.conftest import post_event, signed_headers, table_counts
from webhooks.traffic import samples

NOTHING = {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'"a string"',
        b'{"object": "event", "type": "x.y"}',
        b'{"object": "event", "id": 42, "type": "x.y"}',
        b'{"object": "event", "id": "evt_1\\u0000", "type": "x.y"}',
        b'{"object": "charge", "id": "ch_1", "type": "x.y"}',
        b'{"object": "event", "id": "evt_1"}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"object": "event", "id": "evt_1", "type": "x.y", "data": true}',
        b'{"object": "event", "id": "evt_1", "type": "x.y", "data": {"object": []}}',
    ],
    ids=[
        "text",
        "array",
        "string",
        "no_id",
        "int_id",
        "nul_id",
        "not_event",
        "no_type",
        "deep",
        "data_not_object",
        "no_data_object",
    ],
)
def test_signed_body_that_is_not_an_event_is_refused_and_writes_nothing(client, db, body):
    response = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_event"
    assert table_counts(db) == NOTHING


def test_body_over_the_limit_is_refused_with_413(make_app, db):
    client = make_app(WEBHOOK_MAX_BODY_BYTES=1000).test_client()
    evt = samples.payment_events()[0]
    evt["data"]["object"]["metadata"] = {"padding": "x" * 2000}
    assert post_event(client, evt).status_code == 413
    assert table_counts(db) == NOTHING


def test_healthz_answers_without_the_database(client):
    assert client.get("/healthz").status_code == 200


def test_readyz_is_ready_when_schema_is_current(client):
    assert client.get("/readyz").get_json() == {
        "status": "ready",
        "providers": ["github", "standard", "stripe"],
    }


def test_readyz_is_unready_when_a_migration_is_missing(client, db):
    db.execute("DELETE FROM schema_migrations")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.get_json()["error"] == "schema_not_current"


def test_database_unreachable_answers_503(make_app):
    app = make_app(DATABASE_URL="postgresql://root@127.0.0.1:1/none", WEBHOOK_POOL_TIMEOUT_SECONDS=1)
    client = app.test_client()
    assert client.get("/readyz").status_code == 503
    response = post_event(client, samples.payment_events()[1])
    assert response.status_code == 503
    assert json.loads(response.data) == {"error": "database_unavailable"}
