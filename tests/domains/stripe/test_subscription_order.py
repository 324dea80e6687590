"""Subscription events in any order, duplicated and concurrent, leave one mirror and one decision.

Each delivery of a story gets its own ids (`retag`): rows are keyed by
object id alone, so two orderings compared side by side cannot share them.
"""

import itertools

import pytest

from tests.core.test_delivery_property import _deliver_concurrently
from tests.support.stories import deliver
from tests.support.subscription_stories import (
    DAY,
    MONTH,
    Story,
    dunning,
    jobs,
    lifecycle,
    retag,
    state,
)
from webhooks.domains.stripe.access import ACCESS_CHANGED

START = 1_780_000_000
PROBES = (START + MONTH + DAY, START + MONTH + 5 * DAY, START + 2 * MONTH + 1)


def _ends(db, tag: str) -> list[dict]:
    return [state(db, tag, moment) for moment in PROBES]


def test_every_pair_of_subscription_events_ends_the_same_in_either_order_and_duplicated(client, db):
    story = Story(START)
    events = lifecycle(story)
    for n, ((first, a), (second, b)) in enumerate(itertools.combinations(events, 2)):
        in_order, reversed_ = f"{story.tag}o{n}", f"{story.tag}r{n}"
        deliver(client, retag([a, b], story.tag, in_order))
        deliver(client, retag([b, a, b, a], story.tag, reversed_))
        assert _ends(db, reversed_) == _ends(db, in_order), f"{second} before {first}"


def test_the_whole_lifecycle_reversed_ends_as_delivered_in_order(client, db):
    story = Story(START)
    events = [evt for _, evt in lifecycle(story)]
    deliver(client, retag(events, story.tag, story.tag + "f"))
    deliver(client, retag(events[::-1], story.tag, story.tag + "b"))
    assert _ends(db, story.tag + "b") == _ends(db, story.tag + "f")
    mirror = state(db, story.tag + "f", PROBES[-1])["mirror"][0]
    assert mirror[1] == "canceled"


@pytest.fixture
def impatient_app(make_app):
    return make_app(WEBHOOK_LOCK_TIMEOUT_MS=5)


def test_the_same_event_delivered_eight_times_at_once_enqueues_one_access_change(impatient_app, db):
    story = Story(START)
    activated = lifecycle(story)[2][1]
    statuses = _deliver_concurrently(impatient_app, [[activated] for _ in range(8)])
    assert statuses == [200] * 8
    (job,) = jobs(db, ACCESS_CHANGED.name)
    assert job["change"] == "granted"
    assert job["key"] == f"{ACCESS_CHANGED.name}:{story.sub}:{activated['id']}"


def test_every_event_of_a_subscription_at_once_ends_as_delivered_in_order(client, impatient_app, db):
    story = Story(START)
    events = [evt for _, evt in dunning(story, "unpaid")]
    deliver(client, retag(events, story.tag, story.tag + "s"))
    concurrent = retag(events, story.tag, story.tag + "c")
    statuses = _deliver_concurrently(impatient_app, [[evt] for evt in concurrent + concurrent])
    assert set(statuses) == {200}
    assert _ends(db, story.tag + "c") == _ends(db, story.tag + "s")
