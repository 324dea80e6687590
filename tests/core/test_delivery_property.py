"""Property: however Stripe shuffles, duplicates and parallelises the events of a
set of payments, the shop ends exactly where delivering each event once, in
Stripe's order, leaves it, and every payment is fulfilled exactly once.

Each example delivers its payments under a fresh Connect account: shuffled
to the service, and in Stripe's order to a twin service on its own schema
(event ids are unique, so one ledger cannot take the same events twice as
two independent runs). Examples share the schemas without seeing each
other's rows.

Whether a payment ships depends, by design, on whether its full refund or
dispute arrived before its success (then it is held for review): every
payment is decided exactly once, and held only when that can have happened.
"""

import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import post_event
from tests.support.payment_stories import (
    LISTS_REFUNDS,
    decisions,
    dispute_lifecycle,
    jobs,
    lifecycle_state,
    partial_capture,
    payment_state,
    refund_lifecycle,
)
from tests.support.properties import scaled
from tests.support.rows import count_rows
from tests.support.stories import CardPayment, card_payment, deliver, scoped
from tests.support.twins import twin  # noqa: F401  (fixture)

SENDERS = 6
NOW = int(time.time())

payment_shapes = st.builds(
    CardPayment,
    failed_first=st.booleans(),
    refunds=st.sampled_from([(), (1000,), (3000,), (1000, 3000)]),
    disputed=st.booleans(),
    fraud_warned=st.booleans(),
)


@pytest.fixture
def impatient_app(make_app):
    """A lock wait this short turns many collisions into 409s, so the retry path runs too."""
    return make_app(WEBHOOK_LOCK_TIMEOUT_MS=5)


def _send_until_accepted(client, evt: dict, give_up_after_s: float = 30.0) -> int:
    """Like Stripe: a 409 (same event in flight) is retried until it is answered."""
    deadline = time.monotonic() + give_up_after_s
    while True:
        status = post_event(client, evt).status_code
        if status != 409 or time.monotonic() > deadline:
            return status
        time.sleep(0.01)


def _deliver_concurrently(app, queues: list[list[dict]]) -> list[int]:
    """Each queue on its own thread and test client, all released together."""
    barrier = threading.Barrier(len(queues))
    statuses: list[int] = []
    lock = threading.Lock()

    def run(queue: list[dict]) -> None:
        client = app.test_client()
        barrier.wait()
        for evt in queue:
            status = _send_until_accepted(client, evt)
            with lock:
                statuses.append(status)

    threads = [threading.Thread(target=run, args=(q,)) for q in queues]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


# No shrinking: thread timing makes a failure hard to replay, and the first
# failing plan is reported as drawn.
CONCURRENT = settings(
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _draw_plan(data, events: list[dict], max_copies: int) -> tuple[list[dict], list[int]]:
    """Each event 1..max_copies times, shuffled, each copy given to one of the senders."""
    copies = data.draw(st.lists(st.integers(1, max_copies), min_size=len(events), max_size=len(events)))
    deliveries = data.draw(
        st.permutations([e for e, n in zip(events, copies, strict=True) for _ in range(n)])
    )
    senders = data.draw(
        st.lists(st.integers(0, SENDERS - 1), min_size=len(deliveries), max_size=len(deliveries))
    )
    return deliveries, senders


@settings(CONCURRENT, max_examples=scaled(40))
@given(shapes=st.lists(payment_shapes, min_size=2, max_size=6), data=st.data())
def test_shuffled_duplicated_concurrent_delivery_ends_as_one_sequential_delivery(
    impatient_app, db, twin, shapes, data
):
    app = impatient_app
    stories = [card_payment(shape, NOW + i) for i, shape in enumerate(shapes)]
    events = [evt for story in stories for _, evt in story]
    account = _shuffle_into(app, twin, events, data)

    assert payment_state(db, account) == payment_state(twin.db, account)
    payment_ids = [dict(story)["intent_succeeded"]["data"]["object"]["id"] for story in stories]
    assert decisions(twin.db, account) == {p: "fulfilled" for p in payment_ids}
    decided = decisions(db, account)
    assert sorted(decided) == sorted(payment_ids)
    # Only a full refund (3000 of 3000), a dispute or an early fraud warning
    # can arrive before the success.
    can_hold = {
        p
        for p, shape in zip(payment_ids, shapes, strict=True)
        if shape.disputed or shape.fraud_warned or 3000 in shape.refunds
    }
    assert {p for p, d in decided.items() if d == "held"} <= can_hold
    assert set(decided.values()) <= {"fulfilled", "held"}
    # A warning that did not hold its order came after it shipped: the shop is
    # told, once; one that held it (or came after a hold) tells nothing more.
    keys = [key for _, key in jobs(db)]
    for payment_id, shape, story in zip(payment_ids, shapes, stories, strict=True):
        if shape.fraud_warned:
            warning = dict(story)["fraud_warning"]["data"]["object"]["id"]
            told = keys.count(f"payment.fraud_warning:{warning}")
            assert told == (decided[payment_id] == "fulfilled")
    completed = count_rows(db, "webhook_events", "account = %s AND status = 'completed'", [account])
    assert completed == len(events)


def _shuffle_into(app, twin, events: list[dict], data) -> str:
    """Each event once, in order, to the twin; 1-4 copies of each, shuffled, over
    concurrent senders, to the app. Both under one fresh account, returned."""
    deliveries, senders = _draw_plan(data, events, max_copies=4)
    account = f"acct_{uuid.uuid4().hex[:12]}"
    deliver(twin.client, events, account)
    queues = [
        [scoped(e, account) for e, s in zip(deliveries, senders, strict=True) if s == n]
        for n in range(SENDERS)
    ]
    statuses = _deliver_concurrently(app, queues)
    assert len(statuses) == len(deliveries) and set(statuses) == {200}, statuses
    return account


# ---- Refund and dispute lifecycles (kept apart from the card payments above) ----

LIFECYCLES = {
    "refund": refund_lifecycle,
    "dispute": dispute_lifecycle,
    # Pre-basil: the released 70.00 of a 30.00 capture as a Refund, then 10.00 given back.
    "partial_capture": lambda created: partial_capture(created, LISTS_REFUNDS, refunds=(1000,)),
}


@settings(CONCURRENT, max_examples=scaled(30))
@given(kinds=st.lists(st.sampled_from(sorted(LIFECYCLES)), min_size=1, max_size=3), data=st.data())
def test_shuffled_refund_and_dispute_lifecycles_end_as_one_sequential_delivery_one_job_per_transition(
    impatient_app, db, twin, kinds, data
):
    stories = [LIFECYCLES[kind](NOW + i) for i, kind in enumerate(kinds)]
    account = _shuffle_into(impatient_app, twin, [evt for story in stories for _, evt in story], data)

    assert lifecycle_state(db, account) == lifecycle_state(twin.db, account)
    keys = [key for _, key in jobs(db)]
    assert len(keys) == len(set(keys))
    for kind, story in zip(kinds, stories, strict=True):
        named = dict(story)
        payment_id = named["intent_succeeded"]["data"]["object"]["id"]
        shipped = {f"order.fulfilled:{payment_id}", f"payment.review:{payment_id}"} & set(keys)
        assert len(shipped) == 1
        if kind == "refund":
            r1, r2 = (named[n]["data"]["object"]["id"] for n in ("r1_created", "r2_created"))
            assert {f"refund.failed:{r1}", f"payment.refunded:{r2}"} <= set(keys)
            assert f"refund.failed:{r2}" not in keys
        elif kind == "partial_capture":
            release, refund = named["refund_1000"]["data"]["object"]["refunds"]["data"][::-1]
            assert f"order.fulfilled:{payment_id}" in keys  # a release never holds it
            assert f"payment.refunded:{refund['id']}" in keys
            assert f"payment.refunded:{release['id']}" not in keys
        else:
            dispute = named["dispute_created"]["data"]["object"]["id"]
            assert {f"dispute.opened:{dispute}", f"dispute.closed:{dispute}"} <= set(keys)


# ---- Subscriptions (kept apart from the payments above) ------------------------------------------------
# Whole subscription lifecycles, shuffled, duplicated and sent concurrently,
# end with the mirror, invoices and access decision of one sequential
# delivery. Subscription rows are keyed by object id alone, so the reference
# and the shuffled run each get their own ids (`retag`), not their own account.
from tests.support import subscription_stories as subs  # noqa: E402

subscription_shapes = st.sampled_from(
    ["renewal", "lifecycle", *(f"dunning_{end}" for end in subs.AFTER_RETRIES)]
)


def _subscription_story(shape: str, story: subs.Story) -> list[dict]:
    if shape.startswith("dunning_"):
        events = subs.dunning(story, shape.removeprefix("dunning_"))
    else:
        events = getattr(subs, shape)(story)
    return [evt for _, evt in events]


@settings(CONCURRENT, max_examples=scaled(25))
@given(shapes=st.lists(subscription_shapes, min_size=1, max_size=3), data=st.data())
def test_shuffled_duplicated_concurrent_subscription_events_end_as_one_sequential_delivery(
    make_app, impatient_app, db, shapes, data
):
    app = impatient_app
    tag = uuid.uuid4().hex[:10]
    events = [
        evt
        for i, shape in enumerate(shapes)
        for evt in _subscription_story(shape, subs.Story(NOW + i * subs.DAY, f"{tag}{i}x"))
    ]
    deliveries, senders = _draw_plan(data, events, max_copies=3)

    reference, shuffled = f"{tag}ref", f"{tag}mix"
    # The reference waits for locks as long as the service does by default:
    # even alone, a commit's NOTIFY queues behind every other database's.
    deliver(make_app().test_client(), subs.retag(events, tag, reference))
    queues = [
        subs.retag([e for e, s in zip(deliveries, senders, strict=True) if s == n], tag, shuffled)
        for n in range(SENDERS)
    ]
    statuses = _deliver_concurrently(app, queues)

    assert len(statuses) == len(deliveries) and set(statuses) == {200}, statuses
    for moment in (NOW + subs.MONTH + subs.DAY, NOW + 3 * subs.MONTH):
        assert subs.state(db, shuffled, moment) == subs.state(db, reference, moment)
