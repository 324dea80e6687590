"""Property: however Stripe shuffles, duplicates and parallelises the events of a
set of payments, the shop ends exactly where delivering each event once, in
Stripe's order, leaves it, and every payment is fulfilled exactly once.

Each example delivers its payments under a fresh Connect account (and the
sequential reference run under another), so examples share the test's schema
without seeing each other's rows.
"""
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import post_event
from tests.stories import CardPayment, business_state, card_payment, deliver, scoped

SENDERS = 6
NOW = int(time.time())

payment_shapes = st.builds(
    CardPayment,
    failed_first=st.booleans(),
    refunds=st.sampled_from([(), (1000,), (3000,), (1000, 3000)]),
    disputed=st.booleans(),
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
THREADED = dict(
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _draw_plan(data, events: list[dict], max_copies: int) -> tuple[list[dict], list[int]]:
    """Each event 1..max_copies times, shuffled, each copy given to one of the senders."""
    copies = data.draw(st.lists(st.integers(1, max_copies), min_size=len(events), max_size=len(events)))
    deliveries = data.draw(st.permutations([e for e, n in zip(events, copies) for _ in range(n)]))
    senders = data.draw(
        st.lists(st.integers(0, SENDERS - 1), min_size=len(deliveries), max_size=len(deliveries))
    )
    return deliveries, senders


@settings(max_examples=40, **THREADED)
@given(shapes=st.lists(payment_shapes, min_size=2, max_size=6), data=st.data())
def test_shuffled_duplicated_concurrent_delivery_ends_as_one_sequential_delivery(
    impatient_app, db, shapes, data
):
    app = impatient_app
    stories = [card_payment(shape, NOW + i) for i, shape in enumerate(shapes)]
    events = [evt for story in stories for _, evt in story]
    deliveries, senders = _draw_plan(data, events, max_copies=4)

    reference, shuffled = (f"acct_{kind}_{uuid.uuid4().hex[:12]}" for kind in ("ref", "mix"))
    deliver(app.test_client(), events, reference)
    queues = [[scoped(e, shuffled) for e, s in zip(deliveries, senders) if s == n] for n in range(SENDERS)]
    statuses = _deliver_concurrently(app, queues)

    assert len(statuses) == len(deliveries) and set(statuses) == {200}, statuses
    assert business_state(db, shuffled) == business_state(db, reference)
    payment_ids = sorted(
        evt["data"]["object"]["id"] for story in stories for name, evt in story if name == "intent_succeeded"
    )
    fulfilled_by = db.execute(
        "SELECT f.payment_id FROM webhook_events e JOIN fulfilments f USING (event_id, account)"
        " WHERE e.account = %s AND e.outcome = 'fulfilled' ORDER BY 1",
        [shuffled],
    ).fetchall()
    assert [row[0] for row in fulfilled_by] == payment_ids
    completed = db.execute(
        "SELECT count(*) FROM webhook_events WHERE account = %s AND status = 'completed'", [shuffled]
    ).fetchone()[0]
    assert completed == len(events)


# --- Subscriptions (issue 11) ------------------------------------------------
# Whole subscription lifecycles, shuffled, duplicated and sent concurrently,
# end with the mirror, invoices and access decision of one sequential
# delivery. Subscription rows are keyed by object id alone, so the reference
# and the shuffled run each get their own ids (`retag`), not their own account.
from tests import subscription_stories as subs  # noqa: E402

subscription_shapes = st.sampled_from(
    ["renewal", "lifecycle", *(f"dunning_{end}" for end in subs.AFTER_RETRIES)]
)


def _subscription_story(shape: str, story: subs.Story) -> list[dict]:
    if shape.startswith("dunning_"):
        events = subs.dunning(story, shape.removeprefix("dunning_"))
    else:
        events = getattr(subs, shape)(story)
    return [evt for _, evt in events]


@settings(max_examples=25, **THREADED)
@given(shapes=st.lists(subscription_shapes, min_size=1, max_size=3), data=st.data())
def test_shuffled_duplicated_concurrent_subscription_events_end_as_one_sequential_delivery(
    make_app, impatient_app, db, shapes, data
):
    app = impatient_app
    tag = uuid.uuid4().hex[:10]
    events = [
        evt for i, shape in enumerate(shapes)
        for evt in _subscription_story(shape, subs.Story(NOW + i * subs.DAY, f"{tag}{i}x"))
    ]
    deliveries, senders = _draw_plan(data, events, max_copies=3)

    reference, shuffled = f"{tag}ref", f"{tag}mix"
    # The reference waits for locks as long as the service does by default:
    # even alone, a commit's NOTIFY queues behind every other database's.
    deliver(make_app().test_client(), subs.retag(events, tag, reference))
    queues = [
        subs.retag([e for e, s in zip(deliveries, senders) if s == n], tag, shuffled)
        for n in range(SENDERS)
    ]
    statuses = _deliver_concurrently(app, queues)

    assert len(statuses) == len(deliveries) and set(statuses) == {200}, statuses
    for moment in (NOW + subs.MONTH + subs.DAY, NOW + 3 * subs.MONTH):
        assert subs.state(db, shuffled, moment) == subs.state(db, reference, moment)
