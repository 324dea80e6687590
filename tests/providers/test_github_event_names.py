"""GitHub's unsigned event name must match the signed body's shape (issue 24).

GitHub signs the body alone ("Validating webhook deliveries",
https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries):
X-GitHub-Event and X-GitHub-Delivery are not signed, so a captured body could be
re-sent under another event's name and run that event's handler. Each event's
payload has fields of its own ("Webhook events and payloads",
https://docs.github.com/en/webhooks/webhook-events-and-payloads).
"""

import json
import uuid

import pytest

from tests.support.rows import count_rows
from tests.support.senders import GITHUB
from webhooks.providers import Outgoing

REPO = {"id": 1296269, "full_name": "octocat/Hello-World"}
BODIES = {
    "ping": {"zen": "Design for failure.", "hook_id": 7, "hook": {"id": 7}, "repository": REPO},
    "push": {
        "ref": "refs/heads/main",
        "before": "6113728f",
        "after": "0000000b",
        "commits": [],
        "pusher": {"name": "octocat"},
        "repository": REPO,
    },
    "create": {"ref": "v1.0", "ref_type": "tag", "master_branch": "main", "repository": REPO},
    "delete": {"ref": "v1.0", "ref_type": "tag", "pusher_type": "user", "repository": REPO},
    "issues": {"action": "opened", "issue": {"number": 1347}, "repository": REPO},
    "issue_comment": {
        "action": "created",
        "issue": {"number": 1347},
        "comment": {"id": 1},
        "repository": REPO,
    },
    "pull_request": {"action": "opened", "number": 2, "pull_request": {"id": 1}, "repository": REPO},
    "pull_request_review": {
        "action": "submitted",
        "review": {"id": 1},
        "pull_request": {"id": 1},
        "repository": REPO,
    },
    "deployment": {"action": "created", "deployment": {"id": 1}, "repository": REPO},
    "deployment_status": {
        "action": "created",
        "deployment": {"id": 1},
        "deployment_status": {"state": "success"},
        "repository": REPO,
    },
}


def _post(client, event: str, body: dict):
    return GITHUB.post(client, json.dumps(body).encode(), Outgoing(str(uuid.uuid4()), event))


def _ledger_count(db) -> int:
    return count_rows(db, "webhook_events")


@pytest.mark.parametrize("body", BODIES)
def test_a_github_body_sent_under_another_events_name_is_refused_and_writes_nothing(client, db, body):
    for name in BODIES:
        if name == body:
            continue
        response = _post(client, name, BODIES[body])
        assert response.status_code == 400, (body, name)
        assert response.get_json()["error"] == "invalid_event"
    assert _ledger_count(db) == 0
    assert _post(client, body, BODIES[body]).status_code == 200  # under its own name


def test_a_ping_replayed_under_a_new_delivery_id_answers_pong_and_has_no_effect_to_repeat(client, db):
    first, replay = (_post(client, "ping", BODIES["ping"]) for _ in range(2))
    assert [r.get_json()["outcome"] for r in (first, replay)] == ["pong", "pong"]
    assert count_rows(db, "pgqueuer") == 0


def test_an_event_whose_shape_is_not_known_is_taken_as_named(client, db):
    response = _post(client, "gollum", {"pages": [{"page_name": "Home"}], "repository": REPO})
    assert response.status_code == 200 and response.get_json()["outcome"] == "ignored"
