"""Every outbox job real deliveries leave is one of its kind's model, and matches the JSON Schema
published from it (docs/schemas/<kind>.json, written by .ci/reference).

The stories are the tests' own (tests/support/stories.py, payment_stories.py,
subscription_stories.py, shopify.py, the thin events of test_thin_fetch.py),
delivered through the app as their senders deliver them; the jobs are read
back from the outbox as the worker would send them. Each kind is one a
domain brings (Registry.job_kinds), and docs/outbox.md links each schema.
"""

import json
import time
from pathlib import Path

import jsonschema
import pytest

from bench import jobs as bench_jobs
from tests.conftest import post_event
from tests.domains.stripe.test_thin_fetch import paid_intent, thin_event
from tests.support import shopify
from tests.support.payment_stories import dispute_lifecycle, refund_lifecycle
from tests.support.stories import DAY, CardPayment, card_payment, deliver
from tests.support.subscription_stories import MONTH, Story, at, dunning
from webhooks import bootstrap
from webhooks.core import jobs as job_kinds
from webhooks.domains.stripe import access, checkout, intents
from webhooks.domains.stripe.orders import ORDER_FULFILLED
from webhooks.infra.config import Settings
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schemas"
# Every kind the domains bring, by name.
KINDS = {kind.name: kind for kind in bootstrap.handlers(Settings()).job_kinds()}


def _events(story) -> list[dict]:
    return [evt for _, evt in story]


def _payments(client, now: int) -> None:
    """order.fulfilled, payment.fraud_warning, payment.review, payment.refunded,
    refund.failed, dispute.opened, dispute.closed."""
    deliver(client, _events(card_payment(CardPayment(fraud_warned=True), now - 50 * DAY)))
    held = dict(card_payment(CardPayment(disputed=True), now - 40 * DAY))
    deliver(client, [held["dispute"], held["intent_succeeded"], held["checkout_paid"]])
    deliver(client, _events(refund_lifecycle(now - 30 * DAY)))
    deliver(client, _events(dispute_lifecycle(now - 20 * DAY)))


def _subscriptions(client, db, now: int) -> None:
    """subscription.access_changed told by an event and by the sweep, subscription.trial_ending."""
    story = Story(now - MONTH - 2 * DAY)
    deliver(client, _events(dunning(story, "past_due")))
    assert access.sweep(db, at(story.start + MONTH + 3 * DAY + 60)) == 1
    trial = Story(now - DAY)
    fields = {"trial_start": trial.start, "trial_end": now + 2 * DAY}
    deliver(client, [trial.subscription("trial_will_end", now, "trialing", trial.start, **fields)])


def _fetches(client) -> None:
    """stripe.fetch, for a thin event and for an event of an API version the handlers do not read."""
    assert post_event(client, thin_event(paid_intent())).status_code == 200
    evt = samples.payment_events()[1]
    evt["api_version"] = "2019-10-17"  # older than the range, and of another shape
    del evt["data"]["object"]["amount_received"]
    assert post_event(client, evt).get_json()["outcome"] == "resync_queued"


def _shopify(client) -> None:
    """Every shopify.* job: an order shipped, refunded and cancelled; one held; a data request."""
    shipped, held = shopify.order(), shopify.order()
    for topic, payload in [
        ("orders/paid", shipped),
        ("refunds/create", shopify.refund(shipped["id"])),
        ("orders/cancelled", shopify.cancelled(shipped["id"])),
        ("refunds/create", shopify.refund(held["id"])),
        ("orders/paid", held),
        (
            "customers/data_request",
            {
                "shop_id": 954889,
                "shop_domain": shopify.SHOP,
                "orders_requested": [shipped["id"]],
                "customer": {"id": shipped["customer"]["id"], "email": shipped["email"]},
                "data_request": {"id": 9999},
            },
        ),
    ]:
        assert shopify.post(client, topic, payload).status_code == 200, topic


@pytest.fixture
def jobs(make_app, db) -> list[dict]:
    app = make_app(
        SHOPIFY_WEBHOOK_SECRET=shopify.SHOPIFY_SECRET,
        # Only for the resync's enqueue: no call reaches the API.
        STRIPE_API_KEY="rk_test_schemas",
    )
    client, now = app.test_client(), int(time.time())
    _payments(client, now)
    _subscriptions(client, db, now)
    _fetches(client)
    _shopify(client)
    return _jobs(db)


def _jobs(db) -> list[dict]:
    rows = db.execute("SELECT convert_from(payload, 'UTF8') FROM pgqueuer ORDER BY id").fetchall()
    return [json.loads(payload) for (payload,) in rows]


def _published(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.json").read_text())


def test_every_job_real_deliveries_leave_matches_its_kinds_schema(jobs):
    """Its kind's model, and the schema published from it."""
    kinds = {job["kind"] for job in jobs}
    unknown = sorted(kinds - set(KINDS))
    assert unknown == [], f"job kinds no domain brings: {unknown}"
    for job in jobs:
        job_kinds.check(KINDS[job["kind"]], job)
        # What a receiver checks the job with: the schema in the docs, by another library.
        jsonschema.validate(job, _published(job["kind"]), cls=jsonschema.Draft202012Validator)
    # The stories reach every kind the domains bring.
    assert kinds == set(KINDS)


def test_each_kind_has_a_valid_schema_of_its_own_in_the_docs_linked_from_the_outbox_page():
    """The one its model writes (.ci/reference), linked from docs/outbox.md."""
    page = (ROOT / "docs" / "outbox.md").read_text()
    for name, kind in sorted(KINDS.items()):
        assert kind.model is not None, f"{name} has no model"
        rules = job_kinds.schema(kind)
        assert _published(name) == rules, f"docs/schemas/{name}.json is stale: run .ci/reference"
        jsonschema.Draft202012Validator.check_schema(rules)
        assert rules["properties"]["kind"] == {"const": name}
        assert f"](schemas/{name}.json)" in page, f"docs/outbox.md does not link {name}.json"
    # No schema is left behind by a kind that is gone.
    assert {path.name for path in SCHEMAS.glob("*.json")} == {f"{name}.json" for name in KINDS}


def test_a_job_that_breaks_its_schema_is_refused():
    job = {"kind": "order.fulfilled", "payment_id": 42}
    with pytest.raises(job_kinds.InvalidJob, match="^order.fulfilled job: field payment_id breaks its model"):
        job_kinds.check(ORDER_FULFILLED, job)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(job, _published("order.fulfilled"), cls=jsonschema.Draft202012Validator)


def _order(**fields) -> dict:
    return {**bench_jobs.JOB, **fields}


@pytest.mark.parametrize(
    ("job", "named"),
    [
        (_order(amount=-1), "field amount"),
        (_order(amount="3000"), "field amount"),  # no string for a number, as in the schema
        (_order(currency="EUR"), "field currency"),
        (_order(metadata={"order_id": 8842}), "field metadata"),
        (_order(coupon="SPRING"), "field coupon"),
        ({k: v for k, v in bench_jobs.JOB.items() if k != "customer"}, "field customer"),
    ],
)
def test_a_job_that_breaks_its_model_is_refused_naming_the_field_never_the_value(job, named):
    with pytest.raises(
        job_kinds.InvalidJob, match=f"^order.fulfilled job: {named} breaks its model"
    ) as refused:
        job_kinds.check(ORDER_FULFILLED, job)
    assert "8842" not in str(refused.value) and "SPRING" not in str(refused.value)
    # The published schema refuses it too.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(job, _published("order.fulfilled"), cls=jsonschema.Draft202012Validator)


def test_a_partial_job_is_checked_only_in_the_fields_it_has():
    job_kinds.check(ORDER_FULFILLED, {"kind": "order.fulfilled", "amount": 3000}, partial=True)
    with pytest.raises(job_kinds.InvalidJob, match="field amount"):
        job_kinds.check(ORDER_FULFILLED, {"kind": "order.fulfilled", "amount": None}, partial=True)


@pytest.mark.parametrize("which", ["checkout", "intent"])
def test_what_a_success_states_of_its_job_is_what_the_one_statement_writes(client, db, which):
    """orders.success checks the job a success can become before the SQL function writes it;
    for a payment no other event spoke of, the fields it checks are the job's, value for value."""
    session, intent, _ = samples.payment_events()
    intent["data"]["object"]["metadata"] = {"order_id": "ord_1"}
    evt, success = (
        (session, checkout.payment_success) if which == "checkout" else (intent, intents.payment_success)
    )
    assert post_event(client, evt).get_json()["outcome"] == "fulfilled"
    [written] = [job for job in _jobs(db) if job["kind"] == ORDER_FULFILLED.name]
    event = stripe_wire.parse(samples.encode(evt).decode())
    stated = success(event).stated(event)
    assert stated == {key: written[key] for key in stated}
