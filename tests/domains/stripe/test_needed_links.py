"""A link a handler needs at an event's API version is never missing silently.

invoice.paid reads the invoice's subscription at `subscription` before basil
and at `parent.subscription_details.subscription` from basil on (Stripe's
changelog, https://docs.stripe.com/changelog/basil/2025-03-31/adds-new-parent-field-to-invoicing-objects).
An invoice without the key its version should carry would be fulfilled and
grant no access: it is refused as an unsupported version (500, recorded,
retried, counted), or re-synced when the API is configured.
"""

import pytest

from tests.conftest import post_event
from tests.support.payment_stories import jobs
from tests.support.rows import count_rows
from tests.support.stories import fixture
from tests.support.stripe_api import api_env, stand_in  # noqa: F401  (fixture)
from webhooks.domains.stripe import thin
from webhooks.traffic import samples

FUTURE = "2999-01-01.zinnia"


def _invoice_paid(version: str, pre_basil: bool = False) -> dict:
    evt = fixture("invoice.paid")
    evt.update(id=samples.stripe_id("evt"), api_version=version)
    if pre_basil:
        invoice = evt["data"]["object"]
        sub = invoice.pop("parent")["subscription_details"]["subscription"]
        invoice["subscription"] = sub
    return evt


def _refused_as_unsupported(response, field: str) -> None:
    assert response.status_code == 500
    assert response.get_json()["error"] == "unsupported_api_version"
    assert field in response.get_json()["detail"]
    assert response.headers["X-Outcome"] == "unsupported_api_version"


@pytest.mark.parametrize(
    ("version", "pre_basil", "moved", "field"),
    [
        ("2024-06-20", True, "subscription", "data.object.subscription"),
        ("2025-03-31.basil", False, "parent", "data.object.parent.subscription_details.subscription"),
        (FUTURE, False, "parent", "data.object.parent.subscription_details.subscription"),
    ],
    ids=["pre-basil", "basil", "a-future-version-that-moves-it-again"],
)
def test_an_invoice_without_the_link_its_version_carries_is_refused_not_fulfilled(
    client, db, version, pre_basil, moved, field
):
    evt = _invoice_paid(version, pre_basil)
    invoice = evt["data"]["object"]
    invoice[f"{moved}_renamed"] = invoice.pop(moved)  # the link under a name the handlers do not read
    for _ in range(2):  # nothing claimed: each retry is judged again, and recorded
        _refused_as_unsupported(post_event(client, evt), field)
    assert count_rows(db, "webhook_events") == 0
    assert db.execute("SELECT error_class, count(*) FROM webhook_failures GROUP BY 1").fetchall() == [
        ("UnsupportedApiVersion", 2)
    ]
    assert count_rows(db, "invoice_fulfilments") == 0


@pytest.mark.parametrize("version", ["2024-06-20", "2025-03-31.basil", FUTURE])
def test_an_invoice_with_its_link_is_fulfilled_and_extends_access(client, db, version):
    evt = _invoice_paid(version, pre_basil=version < "2025-03-31")
    assert post_event(client, evt).get_json()["outcome"] == "fulfilled"
    sub = db.execute("SELECT subscription_id FROM invoice_fulfilments").fetchone()[0]
    assert sub and sub.startswith("sub_")


def test_a_one_off_invoice_has_a_null_link_and_is_fulfilled(client, db):
    evt = _invoice_paid("2025-03-31.basil")
    evt["data"]["object"]["parent"] = None
    assert post_event(client, evt).get_json()["outcome"] == "fulfilled"
    assert db.execute("SELECT subscription_id FROM invoice_fulfilments").fetchall() == [(None,)]


def test_a_missing_link_is_resynced_when_the_api_is_configured(make_app, db, stand_in):  # noqa: F811
    client = make_app(**api_env(stand_in)).test_client()
    evt = _invoice_paid("2025-03-31.basil")
    del evt["data"]["object"]["parent"]
    response = post_event(client, evt)
    assert response.get_json()["outcome"] == thin.RESYNC_QUEUED
    assert [kind for kind, _ in jobs(db)] == ["stripe.fetch"]
    assert count_rows(db, "invoice_fulfilments") == 0
