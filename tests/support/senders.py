"""Deliveries signed the way each non-Stripe provider signs them, for in-process and served tests."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from webhooks.bootstrap import PROVIDERS
from webhooks.providers import Outgoing

STANDARD_SECRET = "whsec_" + base64.b64encode(b"standard-primary-key-0123456789").decode()
STANDARD_OTHER_SECRET = "whsec_" + base64.b64encode(b"standard-rotated-key-9876543210").decode()
GITHUB_SECRET = "github-primary-secret-0123456789"
GITHUB_OTHER_SECRET = "github-rotated-secret-9876543210"
JSON_TYPE = "application/json"


def _standard_body(event_type: str) -> dict:
    # The spec's payload: type, timestamp (ISO 8601), data.
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return {"type": event_type, "timestamp": now, "data": {"id": f"obj_{uuid.uuid4().hex[:12]}"}}


def _github_body(event_type: str) -> dict:
    """A body of the event's shape (providers.github.SHAPES): a ping's, an issue's, or any other."""
    repository = {"id": 1296269, "full_name": "octocat/Hello-World"}
    if event_type == "ping":
        return {"zen": "Keep it logically awesome.", "hook_id": 42, "repository": repository}
    if event_type == "issues":
        return {"action": "opened", "issue": {"id": 1, "number": 1347}, "repository": repository}
    return {"action": event_type, "repository": repository}


@dataclass(frozen=True)
class Sender:
    provider: str
    secret: str
    other_secret: str
    # A secret of the same form that this service does not have.
    foreign_secret: str
    setting: str
    # What a body of the given type looks like from this provider.
    payload: Callable[[str], dict]
    # Header names that carry the dedupe id and the type when not in the body.
    id_header: str

    @property
    def path(self) -> str:
        return f"/webhooks/{self.provider}"

    def event(self, event_type: str = "test.effect", event_id: str | None = None) -> tuple[bytes, Outgoing]:
        body = self.payload(event_type)
        body["provider_under_test"] = self.provider
        outgoing = Outgoing(event_id or f"msg_{uuid.uuid4().hex}", event_type)
        return json.dumps(body).encode(), outgoing

    def headers(
        self, body: bytes, outgoing: Outgoing, secret: str | None = None, timestamp: int | None = None
    ) -> dict[str, str]:
        sign = PROVIDERS[self.provider].sign
        if timestamp is not None:
            outgoing = Outgoing(outgoing.event_id, outgoing.event_type, timestamp=timestamp)
        return {"Content-Type": JSON_TYPE, **sign(body, secret or self.secret, outgoing)}

    def post(self, client, body: bytes, outgoing: Outgoing, **sign):
        return client.post(self.path, data=body, headers=self.headers(body, outgoing, **sign))


STANDARD = Sender(
    "standard",
    STANDARD_SECRET,
    STANDARD_OTHER_SECRET,
    "whsec_" + base64.b64encode(b"another-endpoint").decode(),
    "STANDARD_WEBHOOKS_SECRET",
    _standard_body,
    "webhook-id",
)
GITHUB = Sender(
    "github",
    GITHUB_SECRET,
    GITHUB_OTHER_SECRET,
    "another-endpoint",
    "GITHUB_WEBHOOK_SECRET",
    _github_body,
    "X-GitHub-Delivery",
)
SENDERS = (STANDARD, GITHUB)
