"""Standard Webhooks and GitHub through the real app: independent signers, routing, readiness."""

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks

from tests.conftest import post_event, table_counts
from tests.support.rows import count_rows
from tests.support.senders import GITHUB, JSON_TYPE, SENDERS, STANDARD
from webhooks.providers import github
from webhooks.traffic import samples

NOTHING = {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}


@pytest.fixture
def effects(db):
    db.execute("CREATE TABLE provider_effects (provider text, event_id text)")
    return db


def _ledger(db, provider: str) -> list[tuple]:
    return db.execute(
        "SELECT event_id, event_type, account, status, outcome FROM webhook_events WHERE provider = %s",
        [provider],
    ).fetchall()


def test_a_delivery_signed_by_the_standardwebhooks_library_is_claimed_once(client, db, effects):
    body = json.dumps(
        {
            "type": "test.effect",
            "timestamp": "2026-12-03T07:00:00Z",
            "data": {"id": "obj_1"},
            "provider_under_test": "standard",
        }
    )
    msg_id, now = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", datetime.now(UTC)
    signature = standardwebhooks.Webhook(STANDARD.secret).sign(msg_id, now, body)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        # Several signatures, space-separated: one from a key we do not have.
        "webhook-signature": f"v1,{'A' * 44} {signature}",
        "Content-Type": JSON_TYPE,
    }
    first = client.post("/webhooks/standard", data=body, headers=headers)
    again = client.post("/webhooks/standard", data=body, headers=headers)
    assert first.status_code == 200 and first.get_json() == {"event_id": msg_id, "outcome": "effected"}
    assert again.headers["Idempotent-Replayed"] == "true" and again.data == first.data
    assert _ledger(db, "standard") == [(msg_id, "test.effect", "", "completed", "effected")]
    assert count_rows(db, "provider_effects") == 1
    created = db.execute("SELECT event_created FROM webhook_events").fetchone()[0]
    assert created == datetime(2026, 12, 3, 7, tzinfo=UTC)


def test_githubs_documented_example_vector_verifies():
    # docs.github.com, "Validating webhook deliveries": the example secret, payload and digest.
    sent = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    headers = {"X-Hub-Signature-256": sent}
    assert (
        github.verify(b"Hello, World!", headers, ["other", "It's a Secret to Everybody"], 300)
        == "Hello, World!"
    )
    with pytest.raises(Exception, match="no valid signature"):
        github.verify(b"Hello, World!", headers, ["It's a Secret to Everybody!"], 300)


def test_a_github_ping_signed_by_hand_is_answered_pong_and_recorded(client, db):
    body = json.dumps(
        {"zen": "Design for failure.", "hook_id": 7, "repository": {"full_name": "octocat/Hello-World"}}
    ).encode()
    digest = hmac.new(GITHUB.secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "Content-Type": JSON_TYPE,
    }
    answer = client.post("/webhooks/github", data=body, headers=headers)
    assert answer.status_code == 200 and answer.get_json()["outcome"] == "pong"
    assert _ledger(db, "github") == [
        ("72d3162e-cc78-11e3-81ab-4c9367dc0958", "ping", "octocat/Hello-World", "completed", "pong"),
    ]


@pytest.mark.parametrize("sender", SENDERS, ids=lambda s: s.provider)
def test_an_event_type_without_a_handler_is_recorded_as_ignored(client, db, sender):
    body, outgoing = sender.event("issues")
    assert sender.post(client, body, outgoing).get_json()["outcome"] == "ignored"
    assert [row[4] for row in _ledger(db, sender.provider)] == ["ignored"]


def test_the_same_event_id_under_two_providers_is_two_events(client, db, effects):
    stripe_event = samples.payment_events()[1]
    body, outgoing = STANDARD.event("test.effect", event_id=stripe_event["id"])
    assert post_event(client, stripe_event).get_json()["outcome"] == "fulfilled"
    standard = STANDARD.post(client, body, outgoing)
    assert standard.status_code == 200 and "Idempotent-Replayed" not in standard.headers
    assert standard.get_json() == {"event_id": stripe_event["id"], "outcome": "effected"}
    rows = db.execute("SELECT provider, outcome FROM webhook_events ORDER BY provider").fetchall()
    assert rows == [("standard", "effected"), ("stripe", "fulfilled")]


def test_an_unknown_provider_is_404_and_writes_nothing(client, db):
    answer = client.post("/webhooks/paypal", data=b"{}", headers={"Content-Type": JSON_TYPE})
    assert answer.status_code == 404 and answer.get_json() == {"error": "unknown_provider"}
    assert table_counts(db) == NOTHING


@pytest.mark.parametrize("sender", SENDERS, ids=lambda s: s.provider)
def test_a_provider_without_a_secret_is_refused_503_and_readyz_leaves_it_out(make_app, db, sender):
    client = make_app(**{sender.setting: ""}).test_client()
    body, outgoing = sender.event()
    answer = sender.post(client, body, outgoing)
    assert answer.status_code == 503 and answer.get_json() == {"error": "webhook_secret_missing"}
    assert table_counts(db) == NOTHING
    ready = client.get("/readyz")
    assert ready.status_code == 200 and sender.provider not in ready.get_json()["providers"]


def test_readyz_names_the_enabled_providers(make_app):
    client = make_app(GITHUB_WEBHOOK_SECRET="", STANDARD_WEBHOOKS_SECRET="").test_client()
    assert client.get("/readyz").get_json() == {"status": "ready", "providers": ["stripe"]}


def test_standard_tolerance_follows_the_setting_in_both_directions(make_app, db):
    client = make_app(WEBHOOK_TOLERANCE_SECONDS=60).test_client()
    for skew, status in ((-90, 400), (90, 400), (-30, 200)):
        body, outgoing = STANDARD.event("issues")
        answer = STANDARD.post(client, body, outgoing, timestamp=int(time.time()) + skew)
        assert answer.status_code == status, (skew, answer.get_json())


def test_a_standard_secret_that_is_not_whsec_base64_is_named_in_the_refusal(make_app, db):
    client = make_app(STANDARD_WEBHOOKS_SECRET="whsec_").test_client()
    body, outgoing = STANDARD.event("issues")
    answer = STANDARD.post(client, body, outgoing, secret=STANDARD.secret)
    assert answer.status_code == 400
    assert answer.get_json() == {
        "error": "invalid_signature",
        "detail": "no configured secret is a whsec_<base64> secret",
    }
