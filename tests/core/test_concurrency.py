"""Duplicate storms against the app in-process: threads with their own clients and connections."""

import pytest

from tests.conftest import post_event, scripted_event, table_counts
from tests.support.storm import release_together
from webhooks.traffic import checker, samples


def _assert_exactly_once(db, results, event_id):
    assert {r.status for r in results} <= {200, 409}, [r.status for r in results]
    assert table_counts(db)["fulfilments"] == 1
    verdict = checker.check(db, [r.answer(event_id) for r in results])
    assert verdict.passed and verdict.acknowledged == 1, verdict.checks()


@pytest.mark.parametrize("senders", [8, 32])
@pytest.mark.parametrize("trial", range(3))
def test_same_event_from_many_threads_is_fulfilled_once(app, db, senders, trial):
    evt = samples.payment_events()[1]
    clients = [app.test_client() for _ in range(senders)]
    results = release_together([lambda c=c: post_event(c, evt) for c in clients])
    _assert_exactly_once(db, results, evt["id"])
    assert sum(r.status == 200 and not r.replayed for r in results) == 1


@pytest.mark.parametrize("senders", [8, 32])
def test_same_slow_event_from_many_threads_is_fulfilled_once(app, db, senders):
    evt = scripted_event(sleep_s=0.2, payment_id="pi_storm")
    clients = [app.test_client() for _ in range(senders)]
    results = release_together([lambda c=c: post_event(c, evt) for c in clients])
    _assert_exactly_once(db, results, evt["id"])


@pytest.mark.parametrize("trial", range(3))
def test_two_different_events_for_one_payment_fulfil_it_once(app, db, trial):
    checkout, intent, _ = samples.payment_events()
    events = [checkout, intent] * 4
    clients = [app.test_client() for _ in events]
    results = release_together(
        [lambda c=c, e=e: post_event(c, e) for c, e in zip(clients, events, strict=True)]
    )
    assert {r.status for r in results} <= {200, 409}
    assert table_counts(db)["fulfilments"] == 1
    # The provider retries every 409 until it gets a 200; then both events are done.
    for evt in (checkout, intent):
        assert post_event(app.test_client(), evt).status_code == 200
    outcomes = {
        row[0]
        for row in db.execute(
            "SELECT outcome FROM webhook_events WHERE event_id IN (%s, %s)",
            [checkout["id"], intent["id"]],
        )
    }
    assert outcomes == {"fulfilled", "already_fulfilled"}
