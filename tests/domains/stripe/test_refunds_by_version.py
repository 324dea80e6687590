"""A refund reaches the shop once at every API version, however Stripe reports it.

From 2022-11-15 a Charge no longer lists its refunds
(https://docs.stripe.com/changelog/2022-11-15/deprecates-charges-auto-expand),
and until 2024-10-28.acacia `refund.created` was not sent for a card refund:
`charge.refunded` names only the cumulative `amount_refunded`. The worker
then fetches the charge with its refunds expanded and applies it through the
claim, so each refund is told by its id, as a listed one is.
"""

import time

import pytest

from tests import conftest
from tests.conftest import post_event
from tests.support.payment_stories import jobs, refund
from tests.support.stories import deliver
from tests.support.stripe_api import api_env, stand_in  # noqa: F401  (fixture)
from webhooks import bootstrap
from webhooks.domains.stripe import fetch
from webhooks.infra.config import Settings
from webhooks.traffic import samples

NOW = int(time.time())
UNLISTED = "2023-10-16"  # between 2022-11-15 and 2024-10-28.acacia


@pytest.fixture
def fetch_jobs(database_url, db, stand_in):  # noqa: F811
    """Run every queued stripe.fetch job as the worker does; their outcomes."""
    settings = Settings.from_env(
        conftest.service_env(database_url, **api_env(stand_in, STRIPE_API_RETRIES=0))
    )
    service = bootstrap.build(settings, min_size=1, max_size=2)

    def run() -> list[str]:
        rows = db.execute(
            "SELECT payload FROM pgqueuer WHERE headers->>'kind' = %s ORDER BY id", [fetch.FETCH.name]
        ).fetchall()
        return [fetch.run(service, bytes(row[0])).outcome for row in rows]

    yield run
    service.close()


def _paid():
    _, intent, charge = samples.payment_events(3000, created=NOW)
    return intent, charge["data"]["object"]


def _succeeded(ch: dict, amount: int, created: int) -> dict:
    return refund(ch, samples.stripe_id("re"), amount, "succeeded", created)


def _charge_refunded(ch: dict, refunds: list[dict], at: int, version: str = UNLISTED) -> dict:
    """charge.refunded as `version` renders it: no `refunds` key from 2022-11-15 on."""
    refunded = sum(r["amount"] for r in refunds)
    charge = {**ch, "amount_refunded": refunded, "refunded": refunded == ch["amount"]}
    return samples.event("charge.refunded", charge, at, api_version=version)


def _serve(stand_in, ch: dict, refunds: list[dict]) -> None:  # noqa: F811
    """What GET /v1/charges/<id>?expand[]=refunds answers: the charge, its refunds listed newest first."""
    listed = sorted(refunds, key=lambda r: r["created"], reverse=True)
    refunded = sum(r["amount"] for r in refunds)
    stand_in.add(
        "charges",
        {**ch, "amount_refunded": refunded, "refunds": {"object": "list", "data": listed, "has_more": False}},
    )


def _refund_jobs(db) -> list[str]:
    return [key for kind, key in jobs(db) if kind == "payment.refunded"]


def test_a_full_refund_reported_only_as_the_charge_position_is_told_once_by_its_refund(
    client, db, stand_in, fetch_jobs
):
    intent, ch = _paid()
    refund = _succeeded(ch, 3000, NOW + 5)
    refunded = _charge_refunded(ch, [refund], NOW + 5)
    assert deliver(client, [intent, refunded]) == ["fulfilled", "refunded"]
    assert _refund_jobs(db) == []  # nothing fetched inside the claim
    assert stand_in.requests == []
    _serve(stand_in, ch, [refund])
    assert fetch_jobs() == ["refunded"]
    [call] = stand_in.calls("/v1/charges/")
    assert call.query.get("expand[]") == "refunds"
    assert _refund_jobs(db) == [f"payment.refunded:{refund['id']}"]
    assert db.execute("SELECT amount_refunded, refunded FROM payments").fetchone() == (3000, True)


def test_redelivery_an_older_snapshot_and_a_later_refund_event_do_not_tell_it_twice(
    client, db, stand_in, fetch_jobs
):
    intent, ch = _paid()
    first, second = _succeeded(ch, 1000, NOW + 5), _succeeded(ch, 2000, NOW + 10)
    older = _charge_refunded(ch, [first], NOW + 5)
    newer = _charge_refunded(ch, [first, second], NOW + 10)
    # The newer position first, then its redelivery, then the older snapshot.
    assert deliver(client, [intent, newer]) == ["fulfilled", "refunded"]
    assert post_event(client, newer).headers["Idempotent-Replayed"] == "true"
    assert deliver(client, [older]) == ["superseded"]
    _serve(stand_in, ch, [first, second])
    assert fetch_jobs() == ["refunded"]
    assert fetch_jobs() == ["replayed"]  # the job run again meets its claim
    # From acacia on Stripe also sends refund.created for the same refunds.
    later = [
        samples.event("refund.created", r, r["created"], api_version="2024-10-28.acacia")
        for r in (first, second)
    ]
    assert deliver(client, later) == ["superseded", "superseded"]
    assert sorted(_refund_jobs(db)) == sorted(f"payment.refunded:{r['id']}" for r in (first, second))
    assert db.execute("SELECT amount_refunded, refunded FROM payments").fetchone() == (3000, True)


def test_each_partial_refund_is_told_once_as_the_position_grows(client, db, stand_in, fetch_jobs):
    intent, ch = _paid()
    first, second = _succeeded(ch, 1000, NOW + 5), _succeeded(ch, 500, NOW + 10)
    assert deliver(client, [intent, _charge_refunded(ch, [first], NOW + 5)]) == [
        "fulfilled",
        "partially_refunded",
    ]
    _serve(stand_in, ch, [first])
    assert fetch_jobs() == ["partially_refunded"]
    assert deliver(client, [_charge_refunded(ch, [first, second], NOW + 10)]) == ["partially_refunded"]
    _serve(stand_in, ch, [first, second])
    assert fetch_jobs() == ["replayed", "partially_refunded"]
    assert sorted(_refund_jobs(db)) == sorted(f"payment.refunded:{r['id']}" for r in (first, second))


@pytest.mark.parametrize("version", ["2020-08-27", "2022-08-01"])
def test_a_listed_refund_needs_no_fetch(client, db, version):
    intent, ch = _paid()
    refund = _succeeded(ch, 3000, NOW + 5)
    listed = _charge_refunded(ch, [refund], NOW + 5, version)
    listed["data"]["object"]["refunds"] = {"object": "list", "data": [refund], "has_more": False}
    assert deliver(client, [intent, listed]) == ["fulfilled", "refunded"]
    assert [kind for kind, _ in jobs(db)] == ["order.fulfilled", "payment.refunded"]


def test_a_refund_already_known_by_its_id_fetches_nothing(client, db):
    intent, ch = _paid()
    refund = _succeeded(ch, 3000, NOW + 5)
    created = samples.event("refund.created", refund, NOW + 5, api_version="2024-10-28.acacia")
    assert deliver(client, [intent, created, _charge_refunded(ch, [refund], NOW + 5)]) == [
        "fulfilled",
        "refunded",
        "refunded",
    ]
    assert [kind for kind, _ in jobs(db)] == ["order.fulfilled", "payment.refunded"]


def test_from_acacia_the_refund_events_name_the_refund_and_nothing_is_fetched(client, db):
    intent, ch = _paid()
    refund = _succeeded(ch, 3000, NOW + 5)
    unlisted = _charge_refunded(ch, [refund], NOW + 5, "2024-10-28.acacia")
    assert deliver(client, [intent, unlisted]) == ["fulfilled", "refunded"]
    assert [kind for kind, _ in jobs(db)] == ["order.fulfilled"]
