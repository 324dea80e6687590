"""`loadtest --provider shopify`'s traffic, delivered through the app, and its audit."""

from collections import Counter
from functools import partial

from tests.support.rows import count_rows
from tests.support.shopify import SHOPIFY_SECRET, shopify_app  # noqa: F401  (fixtures)
from tests.support.storm import release_together
from webhooks.bootstrap import PROVIDERS
from webhooks.commands import loadtest
from webhooks.traffic import shopify as shopify_traffic


def _deliver(client, body, out):
    headers = PROVIDERS["shopify"].sign(body, SHOPIFY_SECRET, out)
    return client.post("/webhooks/shopify", data=body, headers=headers)


def _deliver_all(shopify_app, sent, copies: int = 3):
    """Each delivery `copies` times, released together, then retried until none is in flight."""
    senders = [partial(_deliver, shopify_app.test_client(), b, o) for b, o in sent for _ in range(copies)]
    for start in range(0, len(senders), 24):
        release_together(senders[start : start + 24])
    client = shopify_app.test_client()
    for body, out in sent:
        assert _deliver(client, body, out).status_code == 200


def test_the_traffic_is_registered_for_shopify():
    assert loadtest.TRAFFIC["shopify"] is shopify_traffic.TRAFFIC


def test_the_traffic_has_n_unique_events_some_orders_twice_and_some_events_resent():
    sent = shopify_traffic.events(35)
    ids = Counter(out.event_id for _, out in sent)
    assert len(ids) == 35 and len(sent) == 35 + 5
    assert len({out.delivery_id for _, out in sent}) == len(sent)
    assert len({body for body, _ in sent}) < 35  # some orders paid twice
    assert {out.event_type for _, out in sent} == {"orders/paid"}


def test_traffic_delivered_through_the_app_passes_its_audit(shopify_app, db):
    sent = shopify_traffic.events(40)
    _deliver_all(shopify_app, sent)
    outgoing = [out for _, out in sent]
    assert shopify_traffic.audit(db, outgoing) == {
        "every event completed once": 0,
        "no event under another provider": 0,
        "each order fulfilled once": 0,
        "one fulfilment job per order": 0,
    }
    orders = len({body for body, _ in sent})
    assert count_rows(db, "shopify_fulfilments") == orders


def test_the_audit_counts_what_went_wrong(shopify_app, db):
    sent = shopify_traffic.events(10)
    _deliver_all(shopify_app, sent[:8], copies=1)  # two events never delivered
    db.execute("DELETE FROM shopify_fulfilments WHERE id = (SELECT min(id) FROM shopify_fulfilments)")
    db.execute("DELETE FROM pgqueuer WHERE id = (SELECT max(id) FROM pgqueuer)")
    report = shopify_traffic.audit(db, [out for _, out in sent])
    assert report["every event completed once"] == 2
    assert report["each order fulfilled once"] == 1
    assert report["one fulfilment job per order"] == 1
