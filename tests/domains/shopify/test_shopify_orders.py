"""Shopify orders: each paid order ships once; a refund or cancellation first holds it."""

import itertools
import json
import uuid
from functools import partial

import pytest

from tests.support.rows import count_rows
from tests.support.shopify import (  # noqa: F401  (fixtures)
    SHOP,
    cancelled,
    fulfilments,
    job_payloads,
    jobs,
    order,
    post,
    refund,
    shopify,
    shopify_app,
)
from tests.support.storm import release_together


def _until_answered(client, topic, payload, event_id):
    """Deliver as Shopify does: a 409 (the order's row is busy) is retried."""
    for _ in range(50):
        response = post(client, topic, payload, event_id=event_id)
        if response.status_code != 409:
            assert response.status_code == 200, response.get_json()
            return response.get_json()["outcome"]
    raise AssertionError("still 409 after 50 tries")


def _kinds(db) -> list[str]:
    return sorted(kind for kind, _ in jobs(db))


@pytest.mark.parametrize("senders", [8, 32])
def test_many_copies_of_one_orders_paid_released_together_ship_it_once(shopify_app, db, senders):
    paid, event_id = order(), str(uuid.uuid4())
    clients = [shopify_app.test_client() for _ in range(senders)]
    # Each copy under its own X-Shopify-Webhook-Id, as several subscriptions would send it.
    results = release_together([lambda c=c: post(c, "orders/paid", paid, event_id=event_id) for c in clients])
    assert {r.status for r in results} <= {200, 409}
    assert sum(r.status == 200 and not r.replayed for r in results) == 1
    assert fulfilments(db) == [(SHOP, paid["id"])]
    assert jobs(db) == [("shopify.order.fulfilled", f"shopify.order.fulfilled:{SHOP}:{paid['id']}")]
    assert count_rows(db, "webhook_events", "status = 'completed'") == 1


def test_the_same_event_id_under_another_webhook_id_is_a_replay(shopify, db):
    paid, event_id = order(), str(uuid.uuid4())
    first = post(shopify, "orders/paid", paid, event_id=event_id, webhook_id="wh-1")
    again = post(shopify, "orders/paid", paid, event_id=event_id, webhook_id="wh-2")
    assert first.get_json()["outcome"] == "fulfilled"
    assert again.headers.get("Idempotent-Replayed") == "true" and again.data == first.data
    assert len(fulfilments(db)) == 1 and len(jobs(db)) == 1


def test_orders_paid_without_an_event_id_is_keyed_by_its_webhook_id_and_still_ships_once(shopify, db):
    paid = order()
    first = post(shopify, "orders/paid", paid, webhook_id="wh-1", without=("X-Shopify-Event-Id",))
    retry = post(shopify, "orders/paid", paid, webhook_id="wh-1", without=("X-Shopify-Event-Id",))
    resent = post(shopify, "orders/paid", paid, webhook_id="wh-2", without=("X-Shopify-Event-Id",))
    assert first.get_json()["outcome"] == "fulfilled"
    assert retry.headers.get("Idempotent-Replayed") == "true" and retry.data == first.data
    # Even if a resend came under a new webhook id, the order's own key ships it once.
    assert resent.get_json()["outcome"] == "already_fulfilled"
    assert len(fulfilments(db)) == 1 and len(jobs(db)) == 1


def test_orders_paid_under_an_event_id_another_topic_took_is_refused_loudly_not_dropped(shopify, db):
    paid = order()
    assert post(shopify, "orders/updated", paid, event_id="evt-shared").status_code == 200
    response = post(shopify, "orders/paid", paid, event_id="evt-shared")
    assert response.status_code == 500 and response.get_json()["error"] == "event_id_reused"
    assert fulfilments(db) == [] and jobs(db) == []
    assert db.execute("SELECT event_type FROM webhook_failures").fetchall() == [("orders/paid",)]


def test_a_second_orders_paid_for_the_order_is_already_fulfilled(shopify, db):
    paid = order()
    assert _until_answered(shopify, "orders/paid", paid, "e1") == "fulfilled"
    assert _until_answered(shopify, "orders/paid", paid, "e2") == "already_fulfilled"
    assert len(fulfilments(db)) == 1 and len(jobs(db)) == 1


@pytest.mark.parametrize("trial", range(3))
def test_two_event_ids_for_one_order_released_together_ship_it_once(shopify_app, db, trial):
    paid, ids = order(), ["first-" + uuid.uuid4().hex, "second-" + uuid.uuid4().hex]
    clients = [shopify_app.test_client() for _ in range(8)]
    results = release_together(
        [lambda c=c, e=ids[i % 2]: post(c, "orders/paid", paid, event_id=e) for i, c in enumerate(clients)]
    )
    assert {r.status for r in results} <= {200, 409}
    outcomes = {_until_answered(shopify_app.test_client(), "orders/paid", paid, e) for e in ids}
    assert outcomes == {"fulfilled", "already_fulfilled"}
    assert len(fulfilments(db)) == 1 and len(jobs(db)) == 1


def test_the_fulfilment_job_carries_the_order_and_line_items_but_no_customer(shopify, db):
    paid = order()
    post(shopify, "orders/paid", paid)
    [job] = job_payloads(db, "shopify.order.fulfilled")
    assert (job["shop"], job["order_id"], job["name"], job["total_price"]) == (
        SHOP,
        paid["id"],
        "#1001",
        "49.00",
    )
    assert job["line_items"] == [{"id": 466157049, "variant_id": 39072856, "sku": "TEA-1", "quantity": 2}]
    text = json.dumps(job)
    assert "bob" not in text.lower() and "Chestnut" not in text and "207119551" not in text


def _story(kind: str):
    paid = order()
    stop = refund(paid["id"]) if kind == "refund" else cancelled(paid["id"])
    topic = "refunds/create" if kind == "refund" else "orders/cancelled"
    return paid, (topic, stop, "stop-" + uuid.uuid4().hex)


@pytest.mark.parametrize("kind", ["refund", "cancel"])
def test_a_refund_or_cancellation_before_orders_paid_holds_the_order_once(shopify, db, kind):
    paid, (topic, stop, stop_id) = _story(kind)
    assert _until_answered(shopify, topic, stop, stop_id) in ("refund_recorded", "cancel_recorded")
    assert _until_answered(shopify, "orders/paid", paid, "p1") == "held"
    assert _until_answered(shopify, "orders/paid", paid, "p2") == "held"
    assert fulfilments(db) == []
    [review] = job_payloads(db, "shopify.order.review")
    assert (review["order_id"], review["reason"]) == (
        paid["id"],
        "refunded" if kind == "refund" else "cancelled",
    )
    assert _kinds(db) == ["shopify.order.review"]


@pytest.mark.parametrize("kind", ["refund", "cancel"])
def test_a_refund_or_cancellation_after_shipping_is_recorded_with_its_job_once(shopify, db, kind):
    paid, (topic, stop, stop_id) = _story(kind)
    assert _until_answered(shopify, "orders/paid", paid, "p1") == "fulfilled"
    assert _until_answered(shopify, topic, stop, stop_id) == ("refunded" if kind == "refund" else "cancelled")
    # The same refund or cancellation again, under another event id: recorded once.
    assert _until_answered(shopify, topic, stop, stop_id + "-again") in (
        "already_recorded",
        "already_cancelled",
    )
    job = "shopify.order.refunded" if kind == "refund" else "shopify.order.cancelled"
    assert _kinds(db) == sorted(["shopify.order.fulfilled", job])
    assert len(fulfilments(db)) == 1
    if kind == "refund":
        [payload] = job_payloads(db, job)
        assert (payload["refund_id"], payload["refund_line_items"]) == (
            stop["id"],
            [{"line_item_id": 466157049, "quantity": 1}],
        )


def _decided_once(db, paid_id: int, told: str) -> None:
    """Either shipped once (and the refund or cancellation told), or held once; never both."""
    kinds = _kinds(db)
    if fulfilments(db):
        assert fulfilments(db) == [(SHOP, paid_id)]
        assert kinds == sorted(["shopify.order.fulfilled", told])
    else:
        assert kinds == ["shopify.order.review"]


@pytest.mark.parametrize("kind", ["refund", "cancel"])
@pytest.mark.parametrize("trial", range(4))
def test_a_refund_or_cancellation_racing_orders_paid_is_decided_once(shopify_app, db, kind, trial):
    paid, (topic, stop, stop_id) = _story(kind)
    sends = [("orders/paid", paid, "p1"), ("orders/paid", paid, "p2"), (topic, stop, stop_id)] * 2
    results = release_together(
        [partial(post, shopify_app.test_client(), s[0], s[1], event_id=s[2]) for s in sends]
    )
    assert {r.status for r in results} <= {200, 409}
    for s in sends:
        _until_answered(shopify_app.test_client(), *s)
    _decided_once(db, paid["id"], "shopify.order.refunded" if kind == "refund" else "shopify.order.cancelled")


@pytest.mark.parametrize("kind", ["refund", "cancel"])
def test_every_delivery_order_of_an_orders_events_is_decided_once(shopify_app, db, kind):
    for perm in itertools.permutations(range(3)):
        paid, (topic, stop, stop_id) = _story(kind)
        sends = [
            ("orders/paid", paid, f"p1-{paid['id']}"),
            ("orders/paid", paid, f"p2-{paid['id']}"),
            (topic, stop, stop_id),
        ]
        client = shopify_app.test_client()
        for i in perm:
            _until_answered(client, *sends[i])
        shipped = count_rows(db, "shopify_fulfilments", "order_id = %s", [paid["id"]])
        reviews = count_rows(
            db, "pgqueuer", "headers->>'idempotency-key' = %s", [f"shopify.order.review:{SHOP}:{paid['id']}"]
        )
        paid_first = min(perm.index(0), perm.index(1)) < perm.index(2)
        assert (shipped, reviews) == ((1, 0) if paid_first else (0, 1)), perm


@pytest.mark.parametrize("kind", ["refund", "cancel"])
@pytest.mark.parametrize("senders", [8, 32])
def test_copies_of_orders_paid_racing_after_a_refund_or_cancellation_hold_it_once(
    shopify_app, db, kind, senders
):
    paid, (topic, stop, stop_id) = _story(kind)
    _until_answered(shopify_app.test_client(), topic, stop, stop_id)
    ids = ["p1-" + uuid.uuid4().hex, "p2-" + uuid.uuid4().hex]
    results = release_together(
        [
            partial(post, shopify_app.test_client(), "orders/paid", paid, event_id=ids[i % 2])
            for i in range(senders)
        ]
    )
    assert {r.status for r in results} <= {200, 409}
    assert {_until_answered(shopify_app.test_client(), "orders/paid", paid, e) for e in ids} == {"held"}
    assert fulfilments(db) == []
    assert jobs(db) == [("shopify.order.review", f"shopify.order.review:{SHOP}:{paid['id']}")]


def test_a_pruned_event_redelivered_meets_the_unique_fulfilment_and_ships_nothing(shopify, db):
    paid = order()
    assert _until_answered(shopify, "orders/paid", paid, "late") == "fulfilled"
    db.execute("DELETE FROM webhook_events")  # what `prune` does once the retry horizon has passed
    db.execute("DELETE FROM pgqueuer")  # the job was delivered
    assert _until_answered(shopify, "orders/paid", paid, "late") == "already_fulfilled"
    assert len(fulfilments(db)) == 1 and jobs(db) == []


def test_a_signed_order_the_handler_refuses_is_recorded_with_its_reason(shopify, db):
    """A refusal of a signed, parsed event is never without a trace (docs/contract.md)."""
    paid = order()
    paid["id"] = "not-a-number"
    response = post(shopify, "orders/paid", paid, event_id="refused-1")
    assert (response.status_code, response.get_json()["error"]) == (400, "invalid_event")
    assert db.execute("SELECT event_id, error_class, error_message FROM webhook_failures").fetchall() == [
        ("refused-1", "InvalidEvent", "payload has no valid order id")
    ]
    assert count_rows(db, "webhook_events") == 0 and count_rows(db, "shopify_orders") == 0
