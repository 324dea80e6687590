"""Thin events: claimed with a `stripe.fetch` job, fetched by the worker outside any
claim, applied once through the same handlers."""

from datetime import UTC, datetime

import psycopg
import pytest

from tests import conftest
from tests.conftest import load_json, post_event
from tests.support.downstream import Downstream, Worker, wait_until
from tests.support.rows import count_rows
from tests.support.stripe_api import api_env, stand_in  # noqa: F401  (fixture)
from webhooks import bootstrap
from webhooks.core import outbox
from webhooks.domains.stripe import fetch, thin
from webhooks.infra.config import Settings
from webhooks.traffic import samples

WORKER_ENV = {
    "WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS": 0.05,
    "WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS": 0.2,
    "WEBHOOK_OUTBOX_POLL_SECONDS": 1,
    "WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS": 2,
    "STRIPE_API_RETRIES": 0,
    "STRIPE_API_TIMEOUT_SECONDS": 60,
}


@pytest.fixture
def run_fetch():
    """fetch.run as the worker runs it: with the Service the worker builds from its settings."""
    services = {}

    def run(settings: Settings, payload: bytes):
        if settings not in services:
            services[settings] = bootstrap.build(settings, min_size=1, max_size=2)
        return fetch.run(services[settings], payload)

    yield run
    for service in services.values():
        service.close()


@pytest.fixture
def downstream():
    receiver = Downstream()
    yield receiver
    receiver.close()


@pytest.fixture
def workers(database_url, stand_in, downstream):
    started = []

    def start() -> Worker:
        env = conftest.service_env(
            database_url,
            WEBHOOK_OUTBOX_URL=downstream.url,
            **api_env(stand_in, **WORKER_ENV),
        )
        started.append(Worker(env))
        return started[-1]

    yield start
    for worker in started:
        worker.stop()


def thin_event(
    obj: dict, thin_type: str = "v1.payment_intent.succeeded", path: str = "/v1/payment_intents/", **extra
) -> dict:
    return {
        "id": samples.stripe_id("evt_test"),
        "object": "v2.core.event",
        "type": thin_type,
        "livemode": False,
        "created": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "related_object": {
            "id": obj["id"],
            "type": obj["object"],
            "url": path + obj["id"],
        },
        **extra,
    }


def paid_intent() -> dict:
    return samples.payment_events()[1]["data"]["object"]


def fulfilments(db, payment_id: str) -> int:
    return count_rows(db, "fulfilments", "payment_id = %s", [payment_id])


def test_a_thin_event_is_claimed_with_a_fetch_job_in_its_transaction(client, db, stand_in):
    intent = paid_intent()
    response = post_event(client, thin_event(intent))
    assert load_json(response)["outcome"] == thin.FETCH_QUEUED
    jobs = outbox.pending(db)
    assert [job.kind for job in jobs] == [fetch.FETCH.name]
    assert fulfilments(db, intent["id"]) == 0
    assert stand_in.requests == []  # nothing fetched inside the claim


def test_a_thin_event_without_a_snapshot_handler_stays_notified(client, db):
    body = conftest.ROOT / "tests/stripe_events/v1.billing.meter.error_report_triggered.json"
    response = post_event(client, body.read_bytes())
    assert load_json(response)["outcome"] == "notified"
    assert outbox.pending(db) == []


def test_the_fetch_job_applies_the_object_once_however_often_it_runs(
    run_fetch, client, db, database_url, stand_in
):
    intent = paid_intent()
    stand_in.add("payment_intents", intent)
    post_event(client, thin_event(intent))
    [row] = db.execute("SELECT payload FROM pgqueuer").fetchall()
    settings = Settings.from_env(conftest.service_env(database_url, **api_env(stand_in)))
    outcomes = [run_fetch(settings, bytes(row[0])).outcome for _ in range(3)]
    assert outcomes == ["fulfilled", "replayed", "replayed"]
    assert fulfilments(db, intent["id"]) == 1
    call = stand_in.calls("/v1/payment_intents/")[0]
    assert call.headers["stripe-version"] == settings.stripe_api_version


def test_a_thin_checkout_session_completed_is_fulfilled_from_the_fetched_session(
    run_fetch, client, db, database_url, stand_in
):
    session = samples.payment_events()[0]["data"]["object"]
    stand_in.add("checkout/sessions", session)
    post_event(client, thin_event(session, "v1.checkout.session.completed", "/v1/checkout/sessions/"))
    [row] = db.execute("SELECT payload FROM pgqueuer").fetchall()
    settings = Settings.from_env(conftest.service_env(database_url, **api_env(stand_in)))
    assert run_fetch(settings, bytes(row[0])).outcome == "fulfilled"
    assert fulfilments(db, session["payment_intent"]) == 1


def test_a_connect_thin_event_is_fetched_with_its_context(run_fetch, client, db, database_url, stand_in):
    intent, account = paid_intent(), "acct_1RkT9sQm3HcW7bLd"
    stand_in.add("payment_intents", intent, account=account)
    post_event(client, thin_event(intent, context=account))
    [row] = db.execute("SELECT payload FROM pgqueuer").fetchall()
    settings = Settings.from_env(conftest.service_env(database_url, **api_env(stand_in)))
    assert run_fetch(settings, bytes(row[0])).outcome == "fulfilled"
    assert stand_in.calls("/v1/payment_intents/")[0].headers["stripe-context"] == account
    assert db.execute("SELECT account FROM fulfilments WHERE payment_id = %s", [intent["id"]]).fetchone() == (
        account,
    )


def test_thin_event_then_worker_ends_with_one_fulfilment(client, db, stand_in, workers, downstream):
    intent = paid_intent()
    stand_in.add("payment_intents", intent)
    post_event(client, thin_event(intent))
    workers()
    wait_until(lambda: fulfilments(db, intent["id"]), 30, "the fetched payment's fulfilment")
    wait_until(lambda: downstream.received, 30, "the fulfilment's order.fulfilled delivery")
    assert fulfilments(db, intent["id"]) == 1
    assert [key.split(":")[0] for key in downstream.keys()] == ["order.fulfilled"]


def test_a_worker_killed_mid_fetch_still_ends_with_one_fulfilment_after_redelivery(
    client, db, stand_in, workers, downstream
):
    intent = paid_intent()
    stand_in.add("payment_intents", intent)
    stall = stand_in.stall(lambda path, query: path.startswith("/v1/payment_intents/"))
    evt = thin_event(intent)
    post_event(client, evt)
    first = workers()
    assert stall.arrived.wait(30), first.output()
    first.kill()
    stall.release.set()
    # Stripe redelivers the thin event meanwhile: the stored answer, no second job.
    again = post_event(client, evt)
    assert again.headers["Idempotent-Replayed"] == "true"
    workers()
    wait_until(lambda: fulfilments(db, intent["id"]), 60, "the retaken job's fulfilment")
    wait_until(lambda: not outbox.depth(db), 60, "the outbox to drain")
    assert fulfilments(db, intent["id"]) == 1
    assert len(stand_in.calls("/v1/payment_intents/")) == 2
    assert downstream.effects["order.fulfilled:" + intent["id"]] == 1


def test_a_fetch_without_an_api_key_is_retried_with_a_clear_error(run_fetch, database_url, db, client):
    intent = paid_intent()
    post_event(client, thin_event(intent))
    [row] = db.execute("SELECT payload FROM pgqueuer").fetchall()
    settings = Settings.from_env(conftest.service_env(database_url))
    with pytest.raises(fetch.FetchFailed, match="STRIPE_API_KEY is not set"):
        run_fetch(settings, bytes(row[0]))


def test_a_resync_job_fetches_the_object_of_a_snapshot_event(run_fetch, database_url, db, stand_in):
    from webhooks.providers.stripe import parse

    evt = samples.payment_events()[1]
    intent = evt["data"]["object"]
    stand_in.add("payment_intents", intent)
    event = parse(samples.encode(evt).decode())
    with psycopg.connect(database_url, autocommit=True) as conn, conn.transaction():
        assert thin.enqueue_resync(conn, event)
    [row] = db.execute("SELECT payload FROM pgqueuer").fetchall()
    settings = Settings.from_env(conftest.service_env(database_url, **api_env(stand_in)))
    assert run_fetch(settings, bytes(row[0])).outcome == "fulfilled"
    assert fulfilments(db, intent["id"]) == 1


def test_an_unsupported_api_version_with_the_api_configured_is_resynced_once(
    run_fetch, make_app, database_url, db, stand_in
):
    evt = samples.payment_events()[1]
    stand_in.add("payment_intents", dict(evt["data"]["object"]))
    # Older than the range, and of another shape: the handlers cannot read it.
    evt["api_version"] = "2019-10-17"
    del evt["data"]["object"]["amount_received"]
    client = make_app(**api_env(stand_in)).test_client()

    for _ in range(2):  # Stripe's redelivery replays the first answer
        assert load_json(post_event(client, evt))["outcome"] == "resync_queued"
    assert fulfilments(db, evt["data"]["object"]["id"]) == 0
    [row] = db.execute("SELECT payload FROM pgqueuer").fetchall()
    settings = Settings.from_env(conftest.service_env(database_url, **api_env(stand_in)))
    assert [run_fetch(settings, bytes(row[0])).outcome for _ in range(2)] == ["fulfilled", "replayed"]
    assert fulfilments(db, evt["data"]["object"]["id"]) == 1


def test_an_unsupported_object_kind_cannot_be_resynced_and_is_refused(make_app, db, stand_in):
    evt = samples.event(
        "customer.subscription.deleted",
        {
            "id": samples.stripe_id("sub"),
            "object": "subscription_schedule",
            "status": "canceled",
        },
    )
    evt["api_version"] = "2019-10-17"  # older than the range, and not its object's shape
    response = post_event(make_app(**api_env(stand_in)).test_client(), evt)
    assert (response.status_code, response.headers["X-Outcome"]) == (500, "unsupported_api_version")
    assert count_rows(db, "pgqueuer") == 0
