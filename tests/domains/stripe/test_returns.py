"""The customer's return and the webhook: two triggers of one fulfilment, once whichever comes first.

Stripe's "Fulfill orders" guide (https://docs.stripe.com/checkout/fulfillment):
the function "might be called multiple times, possibly concurrently, for the
same Checkout Session"; the webhook is required, the redirect only makes the
order visible at once. Payment Links "use Checkout, so all of the information
below applies to both". Line items: "Retrieve a Checkout Session's line
items" (https://docs.stripe.com/api/checkout/sessions/line_items).
"""

import json
import threading
import time
from collections import Counter

import psycopg
import pytest

from tests import conftest
from tests.conftest import load_json, post_event, signed_headers
from tests.support import checkout
from tests.support.downstream import Downstream, Worker, wait_until
from tests.support.rows import count_rows
from tests.support.stripe_api import api_env, stand_in  # noqa: F401  (fixture)
from webhooks.core import jobs
from webhooks.domains.stripe import line_items
from webhooks.domains.stripe.orders import ORDER_FULFILLED
from webhooks.traffic import samples

TOKEN = "fulfil-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROUNDS = 50
WEBHOOK_COPIES = 4


@pytest.fixture
def shop(make_app, stand_in):  # noqa: F811
    return make_app(**api_env(stand_in), WEBHOOK_FULFIL_TOKEN=TOKEN)


def call(client, session_id: str):
    return client.post(f"/stripe/checkout/sessions/{session_id}/fulfil", headers=AUTH)


def completed(obj: dict, event_type: str = "checkout.session.completed") -> dict:
    return samples.event(event_type, obj)


def expected_items(items: list[dict]) -> list[dict]:
    return [line_items.item(line) for line in items]


def test_return_calls_and_webhook_copies_released_together_ship_each_order_once_with_its_line_items(
    shop,
    stand_in,  # noqa: F811
    db,
    monkeypatch,
):
    service = shop.extensions["webhooks.service"]
    sessions = []
    won: Counter = Counter()
    # Released together when the return call starts (its Stripe read lets the copies
    # claim first), or, every other round, when it has read the session and goes to
    # its claim (just after it stores the line items), so each trigger wins some rounds.
    at_claim: dict = {}
    store = line_items.store

    def stored_then_released(*args):
        store(*args)
        if "barrier" in at_claim:
            at_claim["barrier"].wait()

    monkeypatch.setattr(line_items, "store", stored_then_released)
    for round_ in range(ROUNDS):
        obj, items = checkout.put(stand_in, count=3)
        body = samples.encode(completed(obj))
        answers: list = [None] * (1 + WEBHOOK_COPIES)
        barrier = threading.Barrier(1 + WEBHOOK_COPIES)
        at_start = round_ % 2 == 0
        at_claim.clear()
        if not at_start:
            at_claim["barrier"] = barrier

        def returned(obj=obj, answers=answers, barrier=barrier, at_start=at_start):
            client = shop.test_client()
            if at_start:
                barrier.wait()
            answers[0] = call(client, obj["id"])

        def delivered(i, body=body, answers=answers, barrier=barrier):
            client = shop.test_client()
            barrier.wait()
            answers[i] = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))

        threads = [threading.Thread(target=returned)]
        threads += [threading.Thread(target=delivered, args=(i,)) for i in range(1, 1 + WEBHOOK_COPIES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        # Within the bounded wait: an answer, or a 409 for a copy that met its duplicate in flight.
        assert all(a is not None and a.status_code in (200, 409) for a in answers), [
            a and a.data for a in answers
        ]
        fresh = [
            load_json(a)["outcome"]
            for a in answers
            if a.status_code == 200 and a.headers.get("Idempotent-Replayed") != "true"
        ]
        assert fresh.count("fulfilled") == 1, fresh
        if answers[0].status_code == 200:
            body0 = load_json(answers[0])
            assert body0["outcome"] in ("fulfilled", "already_fulfilled")
            won[body0["outcome"]] += 1
            assert body0["order_id"] == obj["payment_intent"]
            assert body0["line_items"] == expected_items(items)
        sessions.append((obj, items))

    for obj, items in sessions:
        [job] = checkout.order_jobs(db, obj["payment_intent"])
        assert count_rows(db, "fulfilments", "payment_id = %s", [obj["payment_intent"]]) == 1
        # The worker adds what the return stored: Stripe is not asked again.
        sent = json.loads(
            line_items.complete(service, json.dumps({"kind": ORDER_FULFILLED.name, **job}).encode())
        )
        assert sent["line_items"] == expected_items(items)
        jobs.check(ORDER_FULFILLED, sent)
    assert won["fulfilled"] > 0 and won["already_fulfilled"] > 0, won
    assert stand_in.calls("/v1/checkout/sessions/") and not [
        r for r in stand_in.calls("/v1/checkout/sessions/") if r.path.endswith("/line_items")
    ]


def test_an_unpaid_delayed_session_awaits_payment_then_ships_once_on_async_payment_succeeded(
    shop,
    stand_in,  # noqa: F811
    db,
):
    client = shop.test_client()
    unpaid, items = checkout.put(stand_in, payment_status="unpaid")
    answer = call(client, unpaid["id"])
    assert (answer.status_code, load_json(answer)["outcome"]) == (200, "awaiting_payment")
    assert load_json(answer)["order_id"] == unpaid["payment_intent"]
    assert load_json(post_event(client, completed(unpaid)))["outcome"] == "awaiting_payment"
    assert load_json(call(client, unpaid["id"]))["outcome"] == "awaiting_payment"
    assert checkout.order_jobs(db, unpaid["payment_intent"]) == []

    # Days later the SEPA debit clears: Stripe's session is paid, and says so in the event.
    paid = {**unpaid, "payment_status": "paid"}
    stand_in.add_session(paid, items)
    success = completed(paid, "checkout.session.async_payment_succeeded")
    assert load_json(post_event(client, success))["outcome"] == "fulfilled"
    assert load_json(call(client, paid["id"]))["outcome"] == "already_fulfilled"
    assert load_json(post_event(client, success))["outcome"] == "fulfilled"  # the stored answer, replayed
    assert len(checkout.order_jobs(db, paid["payment_intent"])) == 1


def test_a_return_after_the_delayed_payment_cleared_ships_it_and_the_webhook_finds_it_shipped(
    shop,
    stand_in,  # noqa: F811
    db,
):
    client = shop.test_client()
    unpaid, items = checkout.put(stand_in, payment_status="unpaid")
    assert load_json(call(client, unpaid["id"]))["outcome"] == "awaiting_payment"
    paid = {**unpaid, "payment_status": "paid"}
    stand_in.add_session(paid, items)
    assert load_json(call(client, paid["id"]))["outcome"] == "fulfilled"
    success = completed(paid, "checkout.session.async_payment_succeeded")
    assert load_json(post_event(client, success))["outcome"] == "already_fulfilled"
    [job] = checkout.order_jobs(db, paid["payment_intent"])
    assert job["event_type"] == "checkout.session.completed" and job["event_id"].startswith(paid["id"])


def test_stripe_down_on_the_return_gives_503_and_the_webhook_still_ships(make_app, stand_in, db):  # noqa: F811
    obj, items = checkout.put(stand_in)
    unreachable = {**api_env(stand_in), "STRIPE_API_BASE": "http://127.0.0.1:1"}
    down = make_app(**unreachable, WEBHOOK_FULFIL_TOKEN=TOKEN)
    client = down.test_client()
    answer = call(client, obj["id"])
    assert answer.status_code == 503 and answer.headers["Retry-After"]
    assert checkout.order_jobs(db, obj["payment_intent"]) == []
    assert load_json(post_event(client, completed(obj)))["outcome"] == "fulfilled"
    [job] = checkout.order_jobs(db, obj["payment_intent"])
    assert "line_items" not in job  # the worker adds them before it POSTs the job


def test_the_worker_reads_line_items_once_stores_them_and_fails_the_job_while_stripe_is_down(
    make_app,
    stand_in,  # noqa: F811
    db,
):
    obj, items = checkout.put(stand_in, count=12)
    app = make_app(**api_env(stand_in, STRIPE_API_RETRIES=0))
    service = app.extensions["webhooks.service"]
    assert load_json(post_event(app.test_client(), completed(obj)))["outcome"] == "fulfilled"
    [job] = checkout.order_jobs(db, obj["payment_intent"])
    payload = json.dumps({"kind": ORDER_FULFILLED.name, **job}).encode()
    pages = f"/v1/checkout/sessions/{obj['id']}/line_items"

    stand_in.fail(lambda path, query: path == pages, times=1, status=503)
    with pytest.raises(jobs.JobFailed, match="line items of"):
        line_items.complete(service, payload)
    sent = json.loads(line_items.complete(service, payload))
    again = json.loads(line_items.complete(service, payload))
    assert sent == again == {"kind": ORDER_FULFILLED.name, **job, "line_items": expected_items(items)}
    assert len(stand_in.calls(pages)) == 2  # the failed read and the one that stored them

    no_key = make_app().extensions["webhooks.service"]
    assert line_items.complete(no_key, payload) == payload


def test_a_payment_links_session_ships_once_through_the_same_path(shop, stand_in, db):  # noqa: F811
    client = shop.test_client()
    obj, items = checkout.put(
        stand_in, payment_link=samples.stripe_id("plink"), client_reference_id=None, metadata={}
    )
    answer = load_json(call(client, obj["id"]))
    assert (answer["outcome"], answer["line_items"]) == ("fulfilled", expected_items(items))
    assert load_json(post_event(client, completed(obj)))["outcome"] == "already_fulfilled"
    [job] = checkout.order_jobs(db, obj["payment_intent"])
    assert job["session_id"] == obj["id"]


def test_the_worker_posts_the_order_with_its_line_items_after_stripe_comes_back(
    make_app,
    stand_in,  # noqa: F811
    database_url,
    db,
):
    obj, items = checkout.put(stand_in, count=4)
    assert load_json(post_event(make_app().test_client(), completed(obj)))["outcome"] == "fulfilled"
    pages = f"/v1/checkout/sessions/{obj['id']}/line_items"
    stand_in.fail(lambda path, query: path == pages, times=2, status=500)
    receiver = Downstream()
    env = conftest.service_env(
        database_url,
        WEBHOOK_OUTBOX_URL=receiver.url,
        WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS=0.05,
        WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS=0.2,
        WEBHOOK_OUTBOX_POLL_SECONDS=1,
        **api_env(stand_in, STRIPE_API_RETRIES=0),
    )
    worker = Worker(env)
    try:
        key = f"{ORDER_FULFILLED.name}:{obj['payment_intent']}"
        wait_until(lambda: key in receiver.effects, 60, "the order's delivery")
        [(_, body)] = [(k, b) for k, b in receiver.received if k == key]
        assert json.loads(body)["line_items"] == expected_items(items)
        assert len(stand_in.calls(pages)) == 3
        assert '"event":"outbox_retry"' in worker.output()
    finally:
        worker.stop()
        receiver.close()


def test_a_return_that_meets_a_trigger_in_flight_answers_409_within_the_lock_timeout(
    shop,
    stand_in,  # noqa: F811
    db,
    database_url,
):
    client = shop.test_client()
    obj, _ = checkout.put(stand_in, payment_status="unpaid")
    assert load_json(call(client, obj["id"]))["outcome"] == "awaiting_payment"
    paid = {**obj, "payment_status": "paid"}
    stand_in.add_session(paid, [])
    # A delivery of the payment's success holds its row, uncommitted, as one in flight does.
    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM payments WHERE payment_id = %s FOR UPDATE", [obj["payment_intent"]])
        started = time.monotonic()
        answer = call(client, obj["id"])
        waited = time.monotonic() - started
        holder.rollback()
    assert (answer.status_code, load_json(answer)["error"]) == (409, "in_progress")
    assert answer.headers["Retry-After"] == "1"
    # WEBHOOK_LOCK_TIMEOUT_MS, the wait a duplicate delivery gets, and not much more.
    assert 1.0 <= waited < 3.0
    assert load_json(call(client, obj["id"]))["outcome"] == "fulfilled"
    assert len(checkout.order_jobs(db, obj["payment_intent"])) == 1
