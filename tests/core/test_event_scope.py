"""Which events are acted on, and under whose keys: livemode, Connect accounts, thin events."""

import json

import psycopg
import pytest
import stripe

from tests.conftest import post_event, table_counts
from tests.support.rows import LEDGER_WITH_PAYLOADS, count_rows
from tests.support.stories import business_state, fixture, fixture_bytes, scoped
from webhooks.infra.config import Settings
from webhooks.traffic import samples

NOTHING = {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}
# A signed, parsed event refused: nothing claimed, its refusal recorded with the reason.
REFUSED = {**NOTHING, "webhook_failures": 1}


def _refusal(db) -> tuple[str, str]:
    return db.execute("SELECT error_class, error_message FROM webhook_failures").fetchone()


THIN = "v1.billing.meter.error_report_triggered"


@pytest.mark.parametrize("mode, livemode", [("live", False), ("test", True), ("live", None), ("test", None)])
def test_event_from_the_other_mode_is_refused_and_recorded_with_its_reason(make_app, db, mode, livemode):
    client = make_app(STRIPE_MODE=mode).test_client()
    evt = fixture("payment_intent.succeeded")
    if livemode is None:
        del evt["livemode"]
    else:
        evt["livemode"] = livemode
    response = post_event(client, evt)
    assert response.status_code == 400
    assert response.get_json()["error"] == "livemode_mismatch"
    assert table_counts(db) == REFUSED
    error_class, reason = _refusal(db)
    assert error_class == "LivemodeMismatch" and f"service runs in {mode} mode" in reason
    assert business_state(db)["payments"] == []


def test_live_event_is_fulfilled_by_a_live_service(make_app, db):
    client = make_app(STRIPE_MODE="live").test_client()
    evt = samples.payment_events()[1]
    evt["livemode"] = True
    assert post_event(client, evt).get_json()["outcome"] == "fulfilled"


@pytest.mark.parametrize("mode, livemode", [("live", False), ("test", True)])
def test_a_connected_accounts_event_of_the_other_mode_is_answered_200_and_only_recorded(
    make_app, db, mode, livemode
):
    """Stripe sends accounts connected in live mode to the live Connect endpoint in both modes."""
    client = make_app(STRIPE_MODE=mode).test_client()
    evt = scoped({**samples.payment_events()[1], "livemode": livemode}, "acct_1ConnectedTest")
    first = post_event(client, evt)
    assert first.status_code == 200
    assert first.get_json() == {"event_id": evt["id"], "outcome": "ignored_other_mode"}
    assert post_event(client, evt).headers["Idempotent-Replayed"] == "true"
    assert table_counts(db) == {**NOTHING, "webhook_events": 1}
    assert business_state(db, "acct_1ConnectedTest")["payments"] == []
    assert count_rows(db, "pgqueuer") == 0
    row = db.execute("SELECT account, livemode, outcome FROM webhook_events").fetchone()
    assert row == ("acct_1ConnectedTest", livemode, "ignored_other_mode")


def test_thin_event_of_the_other_mode_is_refused(make_app, db):
    client = make_app(STRIPE_MODE="live").test_client()
    assert post_event(client, fixture_bytes(THIN)).get_json()["error"] == "livemode_mismatch"
    assert table_counts(db) == REFUSED


def test_stripe_mode_defaults_to_test_and_rejects_unknown_values():
    assert Settings.from_env({}).stripe_mode == "test"
    assert Settings.from_env({"STRIPE_MODE": "LIVE"}).stripe_mode == "live"
    with pytest.raises(ValueError, match="STRIPE_MODE"):
        Settings.from_env({"STRIPE_MODE": "production"})


def test_one_event_under_account_and_under_context_is_one_event(client, db):
    evt = samples.payment_events()[1]
    as_connect = post_event(client, scoped(evt, "acct_1SellerAAAAAAAA"))
    assert as_connect.get_json()["outcome"] == "fulfilled"
    as_context = post_event(client, {**evt, "context": "acct_1PlatformSelf"})
    assert as_context.headers["Idempotent-Replayed"] == "true"
    assert table_counts(db)["webhook_events"] == 1


def test_one_payment_intent_under_account_and_under_context_is_fulfilled_once(client, db):
    checkout, intent, _ = samples.payment_events()
    assert post_event(client, scoped(intent, "acct_1SellerAAAAAAAA")).get_json()["outcome"] == "fulfilled"
    again = post_event(client, {**checkout, "context": "acct_1PlatformSelf"})
    assert again.get_json()["outcome"] == "already_fulfilled"
    payment_id = intent["data"]["object"]["id"]
    assert db.execute("SELECT payment_id, account FROM fulfilments").fetchall() == [
        (payment_id, "acct_1SellerAAAAAAAA")
    ]
    conflicts = db.execute(
        "SELECT object_type, object_id, stored_account, event_account FROM scope_conflicts"
    ).fetchall()
    assert conflicts == [("payment", payment_id, "acct_1SellerAAAAAAAA", "acct_1PlatformSelf")]
    assert count_rows(db, "pgqueuer") == 1


def test_the_unique_key_on_the_payment_holds_across_accounts_even_without_the_ledger(db):
    insert = (
        "INSERT INTO fulfilments (payment_id, provider, account, event_id, event_type)"
        " VALUES ('pi_1', 'stripe', %s, 'evt_1', 'direct')"
    )
    db.execute(insert, ["acct_1"])
    with pytest.raises(psycopg.errors.UniqueViolation, match="fulfilments_payment_id_key"):
        db.execute(insert, ["acct_2"])


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
    row = db.execute(f"SELECT event_type, outcome, payload FROM {LEDGER_WITH_PAYLOADS}").fetchone()
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
    assert table_counts(db) == REFUSED
    assert _refusal(db) == ("InvalidEvent", "event has no valid created time")
