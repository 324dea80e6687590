"""Random mutations of signed Standard Webhooks and GitHub deliveries, in-process."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import table_counts
from tests.support.hostile import by_design_5xx
from tests.support.properties import scaled
from tests.support.reliability import sized
from tests.support.senders import GITHUB, JSON_TYPE, STANDARD
from tests.web.test_hostile_input import _mutated_body, mutated_header

_SETTINGS = settings(
    max_examples=scaled(sized(200, 3000)),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


def _standard_valid(body: bytes, headers: dict, now: float) -> bool:
    """The spec read independently of the service and the library: v1 HMAC of id.timestamp.body."""
    msg_id, stamp, sent = (headers.get(k) for k in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (msg_id and stamp and sent and stamp.isdigit()) or abs(int(stamp) - now) > 300:
        return False
    signed = msg_id.encode() + b"." + stamp.encode() + b"." + body
    for secret in (STANDARD.secret, STANDARD.other_secret):
        key = base64.b64decode(secret.removeprefix("whsec_"))
        expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        if expected in sent.split(" "):
            return True
    return False


def _github_valid(body: bytes, headers: dict, now: float) -> bool:
    sent = headers.get("X-Hub-Signature-256")
    return any(
        sent == "sha256=" + hmac.new(s.encode(), body, hashlib.sha256).hexdigest()
        for s in (GITHUB.secret, GITHUB.other_secret)
    )


_VALID = {"standard": _standard_valid, "github": _github_valid}


@st.composite
def _deliveries(draw, sender) -> tuple[bytes, dict]:
    original, outgoing = sender.event(draw(st.sampled_from(["issues", "ping", "x.y"])))
    body = draw(_mutated_body(original))
    signed_body = body if draw(st.booleans()) else original
    secret = draw(st.sampled_from([sender.secret, sender.other_secret, sender.foreign_secret]))
    skew = draw(st.sampled_from([0, -60, -400, 400]) | st.integers(-1000, 1000))
    try:
        headers = sender.headers(signed_body, outgoing, secret=secret, timestamp=int(time.time()) + skew)
    except UnicodeDecodeError:  # the spec library signs text only
        headers = sender.headers(original, outgoing, secret=secret)
    # Space-separated items are Standard Webhooks' signatures; GitHub's headers have one part.
    items = ["v1,", "v1,AAAA", "v2,abc", "v1", ",", "sha256=", "sha256=" + "0" * 64]
    mutated = {k: draw(mutated_header(v, " ", items)) for k, v in headers.items() if k != "Content-Type"}
    return body, {"Content-Type": JSON_TYPE, **{k: v for k, v in mutated.items() if v is not None}}


def _never_5xx_and_writes_only_when_signed(client, db, sender):
    written = []

    @_SETTINGS
    @given(_deliveries(sender))
    def deliver(delivery):
        body, headers = delivery
        now = time.time()
        before = table_counts(db)
        response = client.post(sender.path, data=body, headers=headers)
        status = response.status_code
        assert status < 500 or by_design_5xx(db, response.get_json()["error"]), response.get_json()
        if table_counts(db) != before:
            assert _VALID[sender.provider](body, headers, now), (status, headers)
            written.append(status)

    deliver()
    # The valid path was exercised too, not only refusals.
    assert written


def test_mutated_standard_deliveries_never_5xx_nor_write_unsigned(client, db):
    _never_5xx_and_writes_only_when_signed(client, db, STANDARD)


def test_mutated_github_deliveries_never_5xx_nor_write_unsigned(client, db):
    _never_5xx_and_writes_only_when_signed(client, db, GITHUB)
