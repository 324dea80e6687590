"""Access that ends with time alone is told once: the sweep behind `subscription.access_changed`.

The stories start a month and two days before the real clock, so the
events' own handling (at the transaction's time) sees a renewal that failed
two days ago, still inside the three-day grace; the sweep is then asked
about later moments.
"""

import json
import threading
import time
from datetime import timedelta

import psycopg

from tests.commands.test_ledger_cli import run  # noqa: F401  (the fixture: the CLI with the test's database)
from tests.support.downstream import wait_until
from tests.support.stories import DAY, deliver
from tests.support.subscription_stories import MONTH, Story, at, dunning, jobs, renewal
from tests.worker.test_outbox import downstreams, workers  # noqa: F401  (fixtures: a downstream, outbox workers)
from webhooks.domains.stripe import access
from webhooks.domains.stripe.access import ACCESS_CHANGED


def _past_due_within_grace(client) -> Story:
    story = Story(int(time.time()) - MONTH - 2 * DAY)
    deliver(client, [evt for _, evt in dunning(story, "past_due")])
    return story


def _grace_end(story: Story) -> int:
    return story.start + MONTH + 3 * DAY


def test_a_grace_running_out_without_an_event_is_told_once_as_revoked(client, db):
    story = _past_due_within_grace(client)
    assert [j["change"] for j in jobs(db, ACCESS_CHANGED.name)] == ["granted"]
    assert access.sweep(db) == 0  # still inside the grace: nothing to tell
    later = at(_grace_end(story) + 60)
    assert access.sweep(db, later) == 1
    assert access.sweep(db, later) == 0
    assert access.sweep(db, later + timedelta(days=1)) == 0
    told = jobs(db, ACCESS_CHANGED.name)[-1]
    assert (told["change"], told["reason"], told["event_id"]) == ("revoked", "grace_expired", None)
    assert told["key"] == f"{ACCESS_CHANGED.name}:{story.sub}:time:{later.isoformat()}"


def test_sweeps_racing_from_several_workers_tell_a_flip_once(client, db, database_url):
    stories = [_past_due_within_grace(client) for _ in range(3)]
    later = at(max(_grace_end(s) for s in stories) + 60)
    barrier, told = threading.Barrier(6), []

    def sweeper():
        with psycopg.connect(database_url, autocommit=True) as conn:
            barrier.wait()
            told.append(access.sweep(conn, later))

    threads = [threading.Thread(target=sweeper) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(told) == 3
    revoked = [j for j in jobs(db, ACCESS_CHANGED.name) if j["change"] == "revoked"]
    assert sorted(j["subscription_id"] for j in revoked) == sorted(s.sub for s in stories)


def test_an_event_after_the_flip_was_told_tells_nothing_again(client, db):
    story = Story(int(time.time()) - MONTH - 5 * DAY)  # the grace ended two days ago
    events = [evt for _, evt in dunning(story, "past_due")]
    deliver(client, events[:-1])  # still active: told "granted"
    assert access.sweep(db) == 0
    deliver(client, events[-1:])  # past_due, grace already over: the event tells it
    assert [j["change"] for j in jobs(db, ACCESS_CHANGED.name)] == ["granted", "revoked"]
    assert access.sweep(db) == 0


def test_the_sweep_command_prints_how_many_flips_it_told(run, client):
    _past_due_within_grace(client)
    code, out = run("subscriptions", "sweep")
    assert (code, out) == (0, "told 0 access changes\n")


def test_a_running_worker_sweeps_and_delivers_the_flip(client, db, downstreams, workers):
    story = _past_due_within_grace(client)
    # A shorter grace, as an operator's new setting would make it: over since a day.
    db.execute("UPDATE subscription_access_settings SET grace = interval '1 day'")
    downstream = downstreams()
    workers(downstream, WEBHOOK_ACCESS_SWEEP_SECONDS=1)
    wait_until(lambda: any(b'"revoked"' in body for _, body in downstream.received), 30, "the revocation")
    time.sleep(1.5)  # a second sweep has run: it must tell nothing more
    told = [json.loads(body) for _, body in downstream.received]
    revoked = [(j["subscription_id"], j["reason"]) for j in told if j["change"] == "revoked"]
    assert revoked == [(story.sub, "grace_expired")]


def test_a_cancel_at_passing_without_an_event_is_told_once_as_revoked(client, db):
    """The Subscription object's `cancel_at` (https://docs.stripe.com/api/subscriptions/object): "a date
    in the future at which the subscription will automatically get canceled"; the sweep tells it."""
    now = int(time.time())
    story = Story(now - 10 * DAY)
    cancel_at = now + 2 * DAY
    events = [evt for _, evt in renewal(story)[:3]]
    events.append(story.subscription("updated", now - DAY, "active", story.start, cancel_at=cancel_at))
    deliver(client, events)
    assert [j["change"] for j in jobs(db, ACCESS_CHANGED.name)] == ["granted"]
    assert access.sweep(db) == 0  # not yet
    later = at(cancel_at + 4)
    assert access.sweep(db, later) == 1
    assert access.sweep(db, later) == 0
    told = jobs(db, ACCESS_CHANGED.name)[-1]
    assert (told["change"], told["reason"], told["event_id"]) == ("revoked", "cancel_at", None)
