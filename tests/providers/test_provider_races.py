"""Duplicate storms for every other provider: one claim, one answer, one effect."""

import pytest

from tests.support.senders import SENDERS
from tests.support.storm import release_together


@pytest.fixture
def effects(db):
    db.execute("CREATE TABLE provider_effects (provider text, event_id text)")
    return db


@pytest.mark.parametrize("senders", [8, 32])
@pytest.mark.parametrize("sender", SENDERS, ids=lambda s: s.provider)
def test_copies_released_together_take_effect_once(app, effects, sender, senders):
    body, outgoing = sender.event("test.effect")
    clients = [app.test_client() for _ in range(senders)]
    # Each copy signed on its own, as a provider's retries are.
    requests = [(c, sender.headers(body, outgoing)) for c in clients]
    results = release_together(
        [lambda c=c, h=h: c.post(sender.path, data=body, headers=h) for c, h in requests]
    )
    assert {r.status for r in results} <= {200, 409}, [r.status for r in results]
    assert sum(r.status == 200 and not r.replayed for r in results) == 1
    assert all(r.replayed for r in results if r.status == 200 and r is not _first(results))
    rows = effects.execute(
        "SELECT provider, status FROM webhook_events WHERE event_id = %s", [outgoing.event_id]
    ).fetchall()
    assert rows == [(sender.provider, "completed")]
    assert effects.execute("SELECT provider, event_id FROM provider_effects").fetchall() == [
        (sender.provider, outgoing.event_id)
    ]


def _first(results):
    return next(r for r in results if r.status == 200 and not r.replayed)
