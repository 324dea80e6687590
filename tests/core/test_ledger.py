"""Exactly-once behaviour of one delivery path, and the measured traps it avoids."""

import json
import threading
import time

import psycopg

from tests.conftest import post_event, scripted_event, table_counts
from webhooks.core import ledger
from webhooks.traffic import samples


def test_new_paid_event_is_fulfilled_and_recorded(client, db):
    evt = samples.payment_events()[1]
    response = post_event(client, evt)
    assert response.status_code == 200
    assert response.get_json() == {"event_id": evt["id"], "outcome": "fulfilled"}
    assert "Idempotent-Replayed" not in response.headers
    row = db.execute(
        "SELECT status, outcome, event_type FROM webhook_events WHERE event_id = %s", [evt["id"]]
    ).fetchone()
    assert row == ("completed", "fulfilled", "payment_intent.succeeded")


def test_redelivery_replays_the_byte_identical_stored_answer(client, db):
    evt = samples.payment_events()[0]
    evt["id"] = "1234567890"  # an id that looks like a number must stay a string
    first = post_event(client, evt)
    again = post_event(client, evt)
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.data == first.data
    assert json.loads(again.data)["event_id"] == "1234567890"
    assert table_counts(db) == {"webhook_events": 1, "webhook_failures": 0, "fulfilments": 1}


def test_an_event_id_already_taken_by_another_type_is_refused_and_recorded_not_replayed(client, db):
    ignored = samples.event("customer.created", {"id": "cus_123", "object": "customer"})
    paid = {**samples.payment_events()[1], "id": ignored["id"]}
    assert post_event(client, ignored).status_code == 200
    response = post_event(client, paid)
    # A replay would answer 200 and the payment would never ship, without a trace.
    assert response.status_code == 500 and response.get_json()["error"] == "event_id_reused"
    assert "Idempotent-Replayed" not in response.headers
    assert table_counts(db) == {"webhook_events": 1, "webhook_failures": 1, "fulfilments": 0}
    assert db.execute("SELECT event_type, error_class FROM webhook_failures").fetchone() == (
        "payment_intent.succeeded",
        "EventIdReused",
    )


def test_unknown_event_type_is_recorded_as_ignored(client, db):
    evt = samples.event("customer.created", {"id": "cus_123", "object": "customer"})
    response = post_event(client, evt)
    assert response.get_json()["outcome"] == "ignored"
    assert table_counts(db)["webhook_events"] == 1
    assert table_counts(db)["fulfilments"] == 0


def test_unpaid_checkout_waits_for_async_payment(client, db):
    evt = samples.payment_events()[0]
    evt["data"]["object"]["payment_status"] = "unpaid"
    assert post_event(client, evt).get_json()["outcome"] == "awaiting_payment"
    assert table_counts(db)["fulfilments"] == 0


def test_second_event_for_the_same_payment_is_already_fulfilled(client, db):
    checkout, intent, _ = samples.payment_events()
    assert post_event(client, checkout).get_json()["outcome"] == "fulfilled"
    assert post_event(client, intent).get_json()["outcome"] == "already_fulfilled"
    assert table_counts(db)["fulfilments"] == 1


def test_claim_and_fulfilment_commit_in_one_transaction(client, db):
    """Both rows carry the same inserting transaction id: no BEGIN scattered over the pool."""
    evt = samples.payment_events()[1]
    post_event(client, evt)
    ledger_xmin, fulfilment_xmin = db.execute(
        "SELECT e.xmin::text, f.xmin::text FROM webhook_events e "
        "JOIN fulfilments f ON f.event_id = e.event_id WHERE e.event_id = %s",
        [evt["id"]],
    ).fetchone()
    assert ledger_xmin == fulfilment_xmin


def test_failed_fulfilment_rolls_back_the_claim_and_is_recorded_separately(client, db):
    evt = scripted_event(fail_attempts=1, payment_id="pi_fail_once")
    failed = post_event(client, evt)
    assert failed.status_code == 500
    counts = table_counts(db)
    assert counts == {"webhook_events": 0, "webhook_failures": 1, "fulfilments": 0}
    retry = post_event(client, evt)
    assert retry.status_code == 200
    assert retry.get_json()["outcome"] == "fulfilled"
    assert table_counts(db) == {"webhook_events": 1, "webhook_failures": 1, "fulfilments": 1}


def test_failure_is_recorded_even_when_the_claim_transaction_was_aborted(client, db):
    evt = scripted_event(abort=True)
    assert post_event(client, evt).status_code == 500
    error_class, payload = db.execute(
        "SELECT error_class, payload FROM webhook_failures WHERE event_id = %s", [evt["id"]]
    ).fetchone()
    assert error_class == "ScriptedFailure"
    assert json.loads(payload)["id"] == evt["id"]
    assert table_counts(db)["webhook_events"] == 0


def test_handler_that_always_violates_a_unique_key_fails_loudly_not_409(client, db):
    paid = samples.payment_events()[1]
    post_event(client, paid)
    evt = scripted_event(clash_payment_id=paid["data"]["object"]["id"])
    response = post_event(client, evt)
    assert response.status_code == 500
    assert response.get_json() == {"error": "fulfilment_failed"}
    error_class = db.execute(
        "SELECT error_class FROM webhook_failures WHERE event_id = %s", [evt["id"]]
    ).fetchone()
    assert error_class == ("UniqueViolation",)
    assert table_counts(db) == {"webhook_events": 1, "webhook_failures": 1, "fulfilments": 1}


def test_loser_survives_the_winning_row_vanishing_before_it_reads_it(client, db, monkeypatch):
    evt = samples.payment_events()[1]
    post_event(client, evt)
    real_claimed = ledger.claimed
    vanished = []

    def lost_then_row_vanished(event, row):
        claim = real_claimed(event, row)
        if claim.ledger_id is None and not vanished:
            # As if pruned between the claim's INSERT and its read of the row.
            db.execute("DELETE FROM webhook_events WHERE event_id = %s", [event.id])
            vanished.append(True)
            return ledger.Claim(None)
        return claim

    monkeypatch.setattr(ledger, "claimed", lost_then_row_vanished)
    response = post_event(client, evt)
    assert vanished
    assert response.status_code == 200
    assert response.get_json()["outcome"] == "already_fulfilled"
    assert table_counts(db)["fulfilments"] == 1


def test_duplicate_of_an_in_flight_delivery_gets_409_within_the_lock_timeout(make_app, db):
    client = make_app(WEBHOOK_LOCK_TIMEOUT_MS=300).test_client()
    evt = scripted_event(sleep_s=2.0, payment_id="pi_slow")
    winner = threading.Thread(target=post_event, args=(client, evt))
    winner.start()
    _wait_for_claim(db, evt["id"])
    started = time.monotonic()
    loser = post_event(client, evt)
    waited = time.monotonic() - started
    winner.join()
    assert loser.status_code == 409
    assert loser.get_json() == {"error": "delivery_in_progress"}
    assert waited < 1.0
    after = post_event(client, evt)
    assert after.status_code == 200 and after.headers["Idempotent-Replayed"] == "true"
    assert table_counts(db)["fulfilments"] == 1


def test_duplicate_waiting_on_a_winner_that_commits_gets_the_stored_answer(client, db):
    evt = scripted_event(sleep_s=0.3, payment_id="pi_quick")
    winner = threading.Thread(target=post_event, args=(client, evt))
    winner.start()
    _wait_for_claim(db, evt["id"])
    loser = post_event(client, evt)
    winner.join()
    assert loser.status_code == 200
    assert loser.headers["Idempotent-Replayed"] == "true"
    assert loser.get_json()["outcome"] == "fulfilled"


def test_duplicate_waiting_on_a_winner_that_rolls_back_claims_the_event(client, db):
    evt = scripted_event(sleep_s=0.3, fail_attempts=1, payment_id="pi_second_try")
    results = []
    winner = threading.Thread(target=lambda: results.append(post_event(client, evt)))
    winner.start()
    _wait_for_claim(db, evt["id"])
    loser = post_event(client, evt)
    winner.join()
    assert results[0].status_code == 500
    assert loser.status_code == 200
    assert loser.get_json()["outcome"] == "fulfilled"
    assert "Idempotent-Replayed" not in loser.headers


def _wait_for_claim(db, event_id: str, timeout: float = 5.0) -> None:
    """Until an uncommitted claim on event_id holds the unique key (seen as a lock wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # An uncommitted insert is invisible; probing with a zero-wait insert shows it.
        try:
            with db.transaction():
                db.execute("SET LOCAL lock_timeout = '1ms'")
                db.execute(
                    "INSERT INTO webhook_events (provider, event_id, event_type) "
                    "VALUES ('stripe', %s, 'probe')",
                    [event_id],
                )
                raise _Rollback
        except psycopg.errors.LockNotAvailable:
            return
        except psycopg.errors.UniqueViolation:
            return
        except _Rollback:
            pass
        time.sleep(0.01)
    raise TimeoutError(f"no claim on {event_id}")


class _Rollback(Exception):
    pass
