"""API versions: the known range reaches the stripe library's, and a newer version is decided by its shape.

Inside STRIPE_API_VERSIONS an event is applied; one of a newer version is
applied when its object has the declared shape (one warning per version,
counted in /metrics), and refused with a retryable, recorded 500 when it
does not; one of an older version, or of none, is refused as before.
"""

import re
import subprocess
import sys

import pytest
import stripe

from tests.conftest import post_event, table_counts
from tests.support.rows import count_rows
from tests.test_docs import DOCS
from tests.web.test_metrics import get_metrics, scrape, value
from webhooks.domains.stripe import versions
from webhooks.infra.config import Settings
from webhooks.traffic import samples

# Stripe's current version when issue 32 was filed: its changelog lists only
# non-breaking changes for it (https://docs.stripe.com/changelog, 2026-11-18.endive).
STRIPES_CURRENT = "2026-11-18.endive"
# A version newer than any the project knows, whatever the installed library pins.
FUTURE = "2999-01-01.zinnia"


def _paid(api_version):
    evt = samples.payment_events()[1]
    if api_version is None:
        del evt["api_version"]
    else:
        evt["api_version"] = api_version
    return evt


def _refused_and_recorded(response, db, evt) -> None:
    assert response.status_code == 500
    assert response.get_json()["error"] == "unsupported_api_version"
    assert response.headers["X-Outcome"] == "unsupported_api_version"
    assert table_counts(db) == {"webhook_events": 0, "webhook_failures": 1, "fulfilments": 0}
    row = db.execute("SELECT event_id, error_class FROM webhook_failures").fetchone()
    assert row == (evt["id"], "UnsupportedApiVersion")
    assert count_rows(db, "payments") == 0


@pytest.mark.parametrize("version", [None, "latest"])
def test_a_handled_event_of_no_version_is_a_recorded_500(client, db, version):
    evt = _paid(version)
    _refused_and_recorded(post_event(client, evt), db, evt)


def test_an_older_version_whose_object_lacks_a_field_the_handlers_read_is_a_recorded_500(client, db):
    evt = _paid("2019-10-17")
    del evt["data"]["object"]["amount_received"]
    response = post_event(client, evt)
    _refused_and_recorded(response, db, evt)
    assert "not the shape the handlers read" in response.get_json()["detail"]


def test_a_newer_version_whose_object_lacks_a_field_the_handlers_read_is_a_recorded_500(client, db):
    evt = _paid(FUTURE)
    del evt["data"]["object"]["amount_received"]  # renamed, say, in that version
    response = post_event(client, evt)
    _refused_and_recorded(response, db, evt)
    assert "not the shape the handlers read" in response.get_json()["detail"]


@pytest.mark.parametrize("version", ["2019-12-03", "2020-03-02"])
def test_a_version_older_than_the_range_ships_by_its_shape_with_one_warning_and_a_count(
    make_app, db, monkeypatch, version
):
    """The range set to start at 2020-08-27 (the default before): older shapes that agree are applied."""
    client = make_app(STRIPE_API_VERSIONS=f"2020-08-27..{stripe.api_version[:10]}").test_client()
    warnings = _Warnings()
    monkeypatch.setattr(versions, "log", warnings)
    monkeypatch.setattr(versions, "_warned", set())

    def counted() -> float:
        page = get_metrics(client).get_data(as_text=True)
        return value(scrape(page), "webhook_stripe_older_api_version_events_total", api_version=version)

    before = counted()
    answers = [post_event(client, _paid(version)) for _ in range(2)]
    assert [a.get_json()["outcome"] for a in answers] == ["fulfilled"] * 2
    assert warnings == [("stripe_api_version_older_than_known", version)]
    assert counted() - before == 2


@pytest.mark.parametrize(
    "version",
    [
        "2019-12-03",
        "2020-03-02",
        "2020-08-27",
        "2024-06-20",
        "2025-03-31.basil",
        "2026-06-24.dahlia",
        stripe.api_version,
    ],
)
def test_versions_in_the_range_are_handled(client, db, version):
    assert post_event(client, _paid(version)).get_json()["outcome"] == "fulfilled"


class _Warnings(list):
    def warning(self, event: str, **fields) -> None:
        self.append((event, fields["api_version"]))


@pytest.mark.parametrize("version", [STRIPES_CURRENT, FUTURE])
def test_a_delivery_at_a_version_newer_than_known_ships_with_one_warning_and_a_count(
    client, db, monkeypatch, version
):
    if version[:10] <= stripe.api_version[:10]:
        pytest.skip(f"the installed stripe library already pins {stripe.api_version}")
    warnings = _Warnings()
    monkeypatch.setattr(versions, "log", warnings)
    monkeypatch.setattr(versions, "_warned", set())

    def counted() -> float:
        page = get_metrics(client).get_data(as_text=True)
        return value(scrape(page), "webhook_stripe_newer_api_version_events_total", api_version=version)

    before = counted()
    answers = [post_event(client, _paid(version)) for _ in range(3)]
    assert [a.get_json()["outcome"] for a in answers] == ["fulfilled"] * 3
    assert warnings == [("stripe_api_version_newer_than_known", version)]
    assert counted() - before == 3


def test_an_unhandled_type_is_ignored_whatever_its_version(client, db):
    evt = samples.event("customer.created", {"id": "cus_1"}, api_version="2015-01-01")
    assert post_event(client, evt).get_json()["outcome"] == "ignored"


def test_the_default_range_reaches_the_version_the_stripe_library_pins():
    """Fails when an upgrade of the stripe library moves its version past the range (or anywhere):
    review the changelog up to it (below), then move STRIPE_LIBRARY_API_VERSION in infra/config.py."""
    settings = Settings.from_env({})
    assert settings.stripe_api_versions == ("2019-12-03", stripe.api_version[:10])
    assert settings.stripe_api_version == stripe.api_version


def test_the_settings_read_the_version_without_importing_the_stripe_library():
    imported = "import sys, webhooks.infra.config; print('stripe' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", imported], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "False"


def test_the_supported_range_is_a_setting():
    parsed = Settings.from_env({"STRIPE_API_VERSIONS": "2022-11-15..2025-03-31.basil"})
    assert parsed.stripe_api_versions == ("2022-11-15", "2025-03-31")
    for bad in ("2025-03-31", "2026-01-01..2025-01-01", "basil..clover"):
        with pytest.raises(ValueError, match="STRIPE_API_VERSIONS"):
            Settings.from_env({"STRIPE_API_VERSIONS": bad})


def reviewed_through() -> str:
    """The newest API version whose changelog docs/events.md says was read against the declared fields."""
    page = (DOCS / "events.md").read_text()
    [version] = re.findall(r"Reviewed against Stripe's changelog through `([0-9-]{10}\.[a-z]+)`", page)
    return version


def test_the_stripe_library_pins_no_version_past_the_changelog_review():
    """Upgrading the stripe library moves the default range; this makes the upgrade a review too.

    When it fails: read Stripe's changelog (https://docs.stripe.com/changelog)
    for every version after the reviewed one up to the library's, list in
    docs/events.md each change to a field a handler reads (the models in
    webhooks/domains/stripe/), update the declarations and handlers for it,
    and move "Reviewed against Stripe's changelog through" to the library's
    version.
    """
    assert stripe.api_version[:10] <= reviewed_through()[:10], (
        f"stripe {stripe.VERSION} pins {stripe.api_version}, newer than the last version reviewed "
        f"({reviewed_through()}): review Stripe's changelog up to it (docs/events.md)"
    )
