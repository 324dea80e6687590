"""Payload shapes the handlers do not know are refused with a retryable 500, recorded."""

import pytest

from tests.conftest import post_event, table_counts
from webhooks.infra.config import Settings
from webhooks.traffic import samples


def _paid(api_version):
    evt = samples.payment_events()[1]
    if api_version is None:
        del evt["api_version"]
    else:
        evt["api_version"] = api_version
    return evt


@pytest.mark.parametrize("version", ["2019-12-03", "2026-09-30.future", None])
def test_a_handled_event_outside_the_supported_versions_is_a_recorded_500(client, db, version):
    evt = _paid(version)
    response = post_event(client, evt)
    assert response.status_code == 500
    assert response.get_json()["error"] == "unsupported_api_version"
    assert response.headers["X-Outcome"] == "unsupported_api_version"
    assert table_counts(db) == {"webhook_events": 0, "webhook_failures": 1, "fulfilments": 0}
    row = db.execute("SELECT event_id, error_class FROM webhook_failures").fetchone()
    assert row == (evt["id"], "UnsupportedApiVersion")
    assert db.execute("SELECT count(*) FROM payments").fetchone()[0] == 0


def test_stripes_retry_is_handled_once_the_range_is_widened(make_app, db):
    evt = _paid("2026-09-30.future")
    assert post_event(make_app().test_client(), evt).status_code == 500
    widened = make_app(STRIPE_API_VERSIONS="2020-08-27..2026-09-30").test_client()
    assert post_event(widened, evt).get_json()["outcome"] == "fulfilled"


@pytest.mark.parametrize("version", ["2020-08-27", "2024-06-20", "2025-03-31.basil", "2026-06-24.dahlia"])
def test_versions_in_the_range_are_handled(client, db, version):
    assert post_event(client, _paid(version)).get_json()["outcome"] == "fulfilled"


def test_an_unhandled_type_is_ignored_whatever_its_version(client, db):
    evt = samples.event("customer.created", {"id": "cus_1"}, api_version="2015-01-01")
    assert post_event(client, evt).get_json()["outcome"] == "ignored"


def test_the_supported_range_is_a_setting():
    assert Settings.from_env({}).stripe_api_versions == ("2020-08-27", "2026-06-24")
    parsed = Settings.from_env({"STRIPE_API_VERSIONS": "2022-11-15..2025-03-31.basil"})
    assert parsed.stripe_api_versions == ("2022-11-15", "2025-03-31")
    for bad in ("2025-03-31", "2026-01-01..2025-01-01", "basil..clover"):
        with pytest.raises(ValueError, match="STRIPE_API_VERSIONS"):
            Settings.from_env({"STRIPE_API_VERSIONS": bad})
