"""Unsigned Shopify headers decide nothing (issue 24).

Shopify signs the body alone (X-Shopify-Hmac-Sha256 over the raw body with the
app's client secret, "Verify webhook deliveries",
https://shopify.dev/docs/apps/build/webhooks/secure); X-Shopify-Shop-Domain,
X-Shopify-Topic and X-Shopify-Event-Id are not signed. One captured delivery
replayed with new headers shipped the same order under invented shops, passed
for a cancellation, wiped the real shop's stored payloads as a shop/redact and
queued a second data-request job. Effects now key on ids from the signed body,
and a body that does not agree with its topic or its shop is refused.
"""

import json
import uuid
from functools import partial

import psycopg
import pytest

from tests.conftest import migrated_before
from tests.support.rows import LEDGER_WITH_PAYLOADS, count_rows
from tests.support.shopify import (  # noqa: F401  (fixtures)
    SHOP,
    cancelled,
    fulfilments,
    jobs,
    order,
    post,
    refund,
    shopify,
    shopify_app,
)
from tests.support.storm import release_together
from webhooks.infra import migrate

OTHER_SHOPS = ["evil-1.myshopify.com", "evil-2.myshopify.com", "evil-3.myshopify.com"]
BOB_EMAIL = "bob.norman@mail.example.com"


def _redact_request(order_id: int) -> dict:
    return {
        "shop_id": 954889,
        "shop_domain": SHOP,
        "orders_to_redact": [order_id],
        "customer": {"id": 207119551, "email": BOB_EMAIL, "phone": "+13125551212"},
    }


def _data_request(order_id: int) -> dict:
    return {
        "shop_id": 954889,
        "shop_domain": SHOP,
        "orders_requested": [order_id],
        "customer": {"id": 207119551, "email": BOB_EMAIL, "phone": "+13125551212"},
        "data_request": {"id": 9999},
    }


def _ledger_count(db) -> int:
    return count_rows(db, "webhook_events")


def _payload(db, event_id: str) -> str:
    return db.execute(
        f"SELECT payload FROM {LEDGER_WITH_PAYLOADS} WHERE event_id = %s", [event_id]
    ).fetchone()[0]


def test_a_captured_orders_paid_replayed_under_new_shops_and_ids_fulfils_nothing_more(shopify_app, db):
    paid = order()
    body = json.dumps(paid).encode()
    assert post(shopify_app.test_client(), "orders/paid", body).get_json()["outcome"] == "fulfilled"
    replays = [(shop, str(uuid.uuid4())) for shop in OTHER_SHOPS for _ in range(3)]
    results = release_together(
        [
            partial(post, shopify_app.test_client(), "orders/paid", body, event_id=e, shop=s)
            for s, e in replays
        ]
    )
    assert {r.status for r in results} <= {200, 409}
    for shop, event_id in replays:  # Shopify-style retries of the 409s
        answer = post(shopify_app.test_client(), "orders/paid", body, event_id=event_id, shop=shop)
        assert answer.status_code == 200 and answer.get_json()["outcome"] == "already_fulfilled"
    assert fulfilments(db) == [(SHOP, paid["id"])]
    assert jobs(db) == [("shopify.order.fulfilled", f"shopify.order.fulfilled:{SHOP}:{paid['id']}")]
    conflicts = db.execute(
        "SELECT DISTINCT object_type, stored_account, event_account FROM scope_conflicts ORDER BY 3"
    ).fetchall()
    assert conflicts == [("shopify_order", SHOP, shop) for shop in OTHER_SHOPS]


@pytest.mark.parametrize("topic", ["refunds/create", "orders/cancelled"])
def test_a_replayed_refund_or_cancellation_under_a_new_shop_and_id_changes_nothing(shopify, db, topic):
    paid = order()
    post(shopify, "orders/paid", paid)
    stop = refund(paid["id"]) if topic == "refunds/create" else cancelled(paid["id"])
    first = post(shopify, topic, stop).get_json()["outcome"]
    again = post(shopify, topic, stop, shop=OTHER_SHOPS[0]).get_json()["outcome"]
    assert (first, again) in {("refunded", "already_recorded"), ("cancelled", "already_cancelled")}
    told = [key for kind, key in jobs(db) if kind != "shopify.order.fulfilled"]
    assert len(told) == 1 and told[0].split(":")[1] == SHOP


BODIES = {
    "paid": lambda: order(),
    "cancelled": lambda: cancelled(order()["id"]),
    "refund": lambda: refund(order()["id"]),
    "customer_redact": lambda: _redact_request(order()["id"]),
    "data_request": lambda: _data_request(order()["id"]),
    "shop_redact": lambda: {"shop_id": 954889, "shop_domain": SHOP},
}
TOPICS = {
    "paid": "orders/paid",
    "cancelled": "orders/cancelled",
    "refund": "refunds/create",
    "customer_redact": "customers/redact",
    "data_request": "customers/data_request",
    "shop_redact": "shop/redact",
}


@pytest.mark.parametrize("body", BODIES)
def test_a_body_sent_under_another_topic_is_refused_and_writes_nothing(shopify, db, body):
    payload = BODIES[body]()
    for kind, topic in TOPICS.items():
        if kind == body:
            continue
        response = post(shopify, topic, payload)
        assert response.status_code == 400, (body, topic)
        assert response.get_json()["error"] == "invalid_event"
    assert _ledger_count(db) == 0 and jobs(db) == [] and fulfilments(db) == []
    assert post(shopify, TOPICS[body], payload).status_code == 200  # under its own topic


@pytest.mark.parametrize(
    "topic, body",
    [
        ("shop/redact", lambda: {"shop_id": 954889, "shop_domain": SHOP}),
        ("customers/redact", lambda: _redact_request(order()["id"])),
        ("customers/data_request", lambda: _data_request(order()["id"])),
    ],
)
def test_a_compliance_request_naming_another_shop_than_its_header_is_refused(shopify, db, topic, body):
    post(shopify, "orders/paid", order(), event_id="other-paid", shop=OTHER_SHOPS[0])
    response = post(shopify, topic, body(), shop=OTHER_SHOPS[0])
    assert response.status_code == 400 and response.get_json()["error"] == "invalid_event"
    assert _ledger_count(db) == 1 and BOB_EMAIL in _payload(db, "other-paid")


@pytest.mark.parametrize("topic", ["shop/redact", "customers/redact"])
def test_a_replayed_redaction_request_under_a_new_id_redacts_nothing_stored_since(shopify, db, topic):
    first_order = order()
    post(shopify, "orders/paid", first_order, event_id="before")
    request = json.dumps(
        {"shop_id": 954889, "shop_domain": SHOP}
        if topic == "shop/redact"
        else _redact_request(first_order["id"])
    ).encode()
    assert post(shopify, topic, request, event_id="request").get_json()["outcome"] == "redacted"
    assert BOB_EMAIL not in _payload(db, "before")
    # The shop reinstalled the app (or the customer ordered again) since.
    post(shopify, "orders/paid", order(), event_id="after")
    replayed = post(shopify, topic, request, event_id="replayed")
    assert replayed.status_code == 200 and replayed.get_json()["outcome"] == "already_done"
    assert BOB_EMAIL in _payload(db, "after")
    assert BOB_EMAIL not in _payload(db, "replayed")  # its own stored copy is redacted


def test_a_replayed_data_request_under_a_new_id_queues_no_second_job(shopify, db):
    request = _data_request(order()["id"])
    assert post(shopify, "customers/data_request", request).get_json()["outcome"] == "data_request_queued"
    db.execute("DELETE FROM pgqueuer")  # the worker delivered the job
    replayed = post(shopify, "customers/data_request", request, event_id=str(uuid.uuid4()))
    assert replayed.get_json()["outcome"] == "already_done" and jobs(db) == []


_OLD_ROWS = """
INSERT INTO shopify_orders (shop, order_id, name, customer_id, paid_at, created_at) VALUES
    ('tea-house.myshopify.com', 1001, '#1001', 7, now(), now() - interval '1 hour'),
    ('evil.myshopify.com', 1001, NULL, NULL, NULL, now()),
    ('evil.myshopify.com', 1002, '#1002', NULL, now(), now());
INSERT INTO shopify_fulfilments (shop, order_id, event_id) VALUES
    ('tea-house.myshopify.com', 1001, 'e1'), ('evil.myshopify.com', 1001, 'e2'),
    ('evil.myshopify.com', 1002, 'e3');
INSERT INTO shopify_refunds (shop, refund_id, order_id, event_id, recorded_at) VALUES
    ('tea-house.myshopify.com', 501, 1001, 'e4', now() - interval '1 minute'),
    ('evil.myshopify.com', 501, 1001, 'e5', now());
"""


def test_migration_0030_folds_an_order_and_refund_stored_under_two_shops_into_the_first(server_url, tmp_path):
    with migrated_before(server_url, "0030", tmp_path) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_OLD_ROWS)
        migrate.migrate(url)
        assert conn.execute(
            "SELECT shop, order_id, name, customer_id, paid_at IS NOT NULL FROM shopify_orders ORDER BY 2"
        ).fetchall() == [(SHOP, 1001, "#1001", 7, True), ("evil.myshopify.com", 1002, "#1002", None, True)]
        assert conn.execute(
            "SELECT shop, order_id, event_id FROM shopify_fulfilments ORDER BY 2"
        ).fetchall() == [(SHOP, 1001, "e1"), ("evil.myshopify.com", 1002, "e3")]
        assert conn.execute("SELECT shop, refund_id FROM shopify_refunds").fetchall() == [(SHOP, 501)]
        assert conn.execute(
            "SELECT object_type, object_id, stored_account, event_account FROM scope_conflicts ORDER BY 1"
        ).fetchall() == [
            ("shopify_order", "1001", SHOP, "evil.myshopify.com"),
            ("shopify_refund", "501", SHOP, "evil.myshopify.com"),
        ]
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO shopify_fulfilments (shop, order_id, event_id)"
                " VALUES ('x.myshopify.com', 1001, 'e9')"
            )
