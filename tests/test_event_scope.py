"""Which events are acted on, and under whose keys: livemode, Connect accounts, thin events."""
import json

import psycopg
import pytest
import stripe

from tests.conftest import post_event, table_counts
from tests.stories import business_state, fixture, fixture_bytes, scoped
from webhooks.ops import samples
from webhooks.service.config import Settings

NOTHING = {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}
THIN = "v1.billing.meter.error_report_triggered"


@pytest.mark.parametrize(
    "mode, livemode", [("live", False), ("test", True), ("live", None), ("test", None)]
)
def test_event_from_the_other_mode_is_refused_and_writes_nothing(make_app, db, mode, livemode):
    client = make_app(STRIPE_MODE=mode).test_client()
    evt = fixture("payment_intent.succeeded")
    if livemode is None:
        del evt["livemode"]
    else:
        evt["livemode"] = livemode
    response = post_event(client, evt)
    assert response.status_code == 400
    assert response.get_json()["error"] == "livemode_mismatch"
    assert table_counts(db) == NOTHING
    assert business_state(db)["payments"] == []


def test_live_event_is_fulfilled_by_a_live_service(make_app, db):
    client = make_app(STRIPE_MODE="live").test_client()
    evt = fixture("payment_intent.succeeded")
    evt["livemode"] = True
    assert post_event(client, evt).get_json()["outcome"] == "fulfilled"


def test_thin_event_of_the_other_mode_is_refused(make_app, db):
    client = make_app(STRIPE_MODE="live").test_client()
    assert post_event(client, fixture_bytes(THIN)).get_json()["error"] == "livemode_mismatch"
    assert table_counts(db) == NOTHING


def test_stripe_mode_defaults_to_test_and_rejects_unknown_values():
    assert Settings.from_env({}).stripe_mode == "test"
    assert Settings.from_env({"STRIPE_MODE": "LIVE"}).stripe_mode == "live"
    with pytest.raises(ValueError, match="STRIPE_MODE"):
        Settings.from_env({"STRIPE_MODE": "production"})


def test_two_connected_accounts_with_the_same_ids_do_not_collide(client, db):
    evt = fixture("payment_intent.succeeded")
    for account in ("acct_1SellerAAAAAAAA", "acct_1SellerBBBBBBBB", ""):
        assert post_event(client, scoped(evt, account)).get_json()["outcome"] == "fulfilled"
    again = post_event(client, scoped(evt, "acct_1SellerAAAAAAAA"))
    assert again.headers["Idempotent-Replayed"] == "true"
    rows = db.execute("SELECT account, payment_id FROM fulfilments ORDER BY account").fetchall()
    intent = evt["data"]["object"]["id"]
    assert rows == [("", intent), ("acct_1SellerAAAAAAAA", intent), ("acct_1SellerBBBBBBBB", intent)]
    assert table_counts(db)["webhook_events"] == 3


def test_the_unique_keys_hold_per_account_even_without_the_ledger(db):
    insert = (
        "INSERT INTO fulfilments (payment_id, provider, account, event_id, event_type)"
        " VALUES ('pi_1', 'stripe', %s, 'evt_1', 'direct')"
    )
    db.execute(insert, ["acct_1"])
    db.execute(insert, ["acct_2"])
    with pytest.raises(psycopg.errors.UniqueViolation, match="fulfilments_payment_id_key"):
        db.execute(insert, ["acct_1"])


def test_thin_event_is_claimed_and_recorded_without_fetching_its_object(client, db, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a thin event must not call the Stripe API")

    monkeypatch.setattr(stripe.StripeClient, "raw_request", no_network)
    monkeypatch.setattr(stripe._api_requestor._APIRequestor, "request_raw", no_network)
    body = fixture_bytes(THIN)
    first = post_event(client, body)
    assert first.get_json() == {"event_id": fixture(THIN)["id"], "outcome": "notified"}
    again = post_event(client, body)
    assert again.headers["Idempotent-Replayed"] == "true" and again.data == first.data
    row = db.execute("SELECT event_type, outcome, payload FROM webhook_events").fetchone()
    assert row[:2] == (THIN, "notified")
    assert json.loads(row[2])["related_object"]["id"] == fixture(THIN)["related_object"]["id"]


def test_thin_event_of_a_connected_account_is_scoped_by_its_context(client, db):
    evt = {**fixture(THIN), "context": "acct_1RkT9sQm3HcW7bLd"}
    assert post_event(client, evt).get_json()["outcome"] == "notified"
    assert db.execute("SELECT account FROM webhook_events").fetchone()[0] == evt["context"]


@pytest.mark.parametrize("missing", ["created", "related_object"])
def test_thin_event_the_stripe_library_cannot_read_is_refused(client, db, missing):
    evt = {k: v for k, v in fixture(THIN).items() if k != missing}
    response = post_event(client, evt)
    assert response.status_code == 400
    assert response.get_json()["error"] == "invalid_event"
    assert table_counts(db) == NOTHING


def test_state_changing_event_without_a_created_time_is_refused(client, db):
    evt = samples.payment_events()[1]
    del evt["created"]
    assert post_event(client, evt).status_code == 400
    assert table_counts(db) == NOTHING
