"""`python -m webhooks replay`: files and ledger events re-sent signed like Stripe."""

import json
from datetime import UTC, datetime

import pytest

from tests.commands.test_loadtest import run_command
from tests.conftest import post_event
from tests.support.rows import count_rows
from webhooks.providers import Outgoing
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples


@pytest.fixture
def server(gunicorn):
    return gunicorn()


def test_replaying_a_file_k_times_fulfils_once_and_replays_the_rest(server, database_url, db, tmp_path):
    evt = samples.payment_events()[1]
    path = tmp_path / "event.json"
    path.write_bytes(samples.encode(evt))
    done = run_command(server, database_url, "replay", str(path), "--times", "3")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert [line.split()[:3] for line in lines] == [
        [evt["id"], "#1:", "200"],
        [evt["id"], "#2:", "200"],
        [evt["id"], "#3:", "200"],
    ]
    assert "(Idempotent-Replayed)" not in lines[0]
    assert all("(Idempotent-Replayed)" in line for line in lines[1:])
    assert json.loads(lines[0].split(" ", 3)[3])["outcome"] == "fulfilled"
    assert count_rows(db, "fulfilments") == 1


def test_replay_selects_ledger_events_by_type_and_time(server, database_url, app, db):
    client = app.test_client()
    post_event(client, samples.payment_events()[1])  # before --since: not replayed
    since = datetime.now(UTC)
    checkout, intent, charge = samples.payment_events()
    for evt in (checkout, intent, charge):
        post_event(client, evt)
    done = run_command(
        server,
        database_url,
        "replay",
        "--type",
        "payment_intent.succeeded",
        "--type",
        "charge.succeeded",
        "--since",
        since.isoformat(),
    )
    assert done.returncode == 0
    sent = [line.split()[0] for line in done.stdout.splitlines()]
    assert sent == [intent["id"], charge["id"]]
    assert done.stdout.count("(Idempotent-Replayed)") == 2


def test_replay_reports_a_refused_delivery_with_a_failing_exit(server, database_url, tmp_path):
    path = tmp_path / "event.json"
    path.write_bytes(samples.encode(samples.payment_events()[0]))
    done = run_command(server, database_url, "replay", str(path), "--secret", "whsec_wrong")
    assert done.returncode == 1
    assert '400 {"error":"invalid_signature"' in done.stdout


def test_stripe_headers_carry_a_signature_the_service_verifies():
    body = samples.encode(samples.payment_events()[0])
    headers = stripe_wire.PROVIDER.sign(body, "whsec_x", Outgoing("evt_1", "checkout.session.completed"))
    assert headers["User-Agent"] == "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    stripe_wire.verify(body, headers["Stripe-Signature"], ["whsec_x"], 300)
