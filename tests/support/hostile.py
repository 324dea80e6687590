"""Hostile deliveries, each with the answer it must get: the catalogue the tests send."""

from __future__ import annotations

import gzip
import hashlib
import hmac
import http.client
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.conftest import SECRET, signed_headers
from tests.support.senders import Sender
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples

JSON_TYPE = "application/json; charset=utf-8"


@dataclass(frozen=True)
class Request:
    body: bytes
    headers: dict[str, str]
    chunked: bool = False
    path: str = "/webhooks/stripe"
    # Declare this many bytes more than the body has, then stop sending (body_incomplete).
    short_by: int = 0


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[dict], Request]
    status: int
    error: str | None = None  # our JSON error code; None when gunicorn answers first
    writes: dict[str, int] = field(default_factory=dict)  # rows expected per table


def now_s() -> int:
    return int(time.time())


def _body(evt: dict) -> bytes:
    return samples.encode(evt)


def signed(body: bytes, **sign) -> Request:
    return Request(body, signed_headers(body, **sign))


def _with_signature(body: bytes, value: str) -> Request:
    return Request(body, {"Stripe-Signature": value, "Content-Type": JSON_TYPE})


def v1_digest(body: bytes, secret: str, t: int) -> str:
    """Stripe's scheme, HMAC-SHA256 of "{t}.{body}", over raw bytes (the stripe helper takes str only)."""
    return hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()


def hmac_header(body: bytes, secret: str = SECRET) -> str:
    t = now_s()
    return f"t={t},v1={v1_digest(body, secret, t)}"


def _retyped(evt: dict, content_type: str) -> Request:
    request = signed(_body(evt))
    return Request(request.body, {**request.headers, "Content-Type": content_type})


def _oversized(evt: dict) -> bytes:
    evt["data"]["object"]["metadata"] = {"padding": "x" * (512 * 1024)}
    return _body(evt)


def _event_without(key: str) -> Callable[[dict], Request]:
    def make(evt: dict) -> Request:
        del evt[key]
        return signed(_body(evt))

    return make


def _event_with(key: str, value) -> Callable[[dict], Request]:
    def make(evt: dict) -> Request:
        evt[key] = value
        return signed(_body(evt))

    return make


def _padded_signature(size: int) -> Callable[[dict], Request]:
    def make(evt: dict) -> Request:
        body = _body(evt)
        return _with_signature(body, stripe_wire.sign(body, SECRET) + ",v0=" + "a" * size)

    return make


BAD_SIGNATURE = dict(status=400, error="invalid_signature")
BAD_EVENT = dict(status=400, error="invalid_event")
GUNICORN_REFUSES = dict(status=431, error=None)
ONE_EVENT = {"webhook_events": 1, "fulfilments": 1}

CATALOGUE = [
    Case(
        "no Stripe-Signature header",
        lambda e: Request(_body(e), {"Content-Type": JSON_TYPE}),
        **BAD_SIGNATURE,
    ),
    Case("empty Stripe-Signature", lambda e: _with_signature(_body(e), ""), **BAD_SIGNATURE),
    Case(
        "malformed Stripe-Signature (t=abc,v1)",
        lambda e: _with_signature(_body(e), "t=abc,v1"),
        **BAD_SIGNATURE,
    ),
    Case(
        "signature without a timestamp",
        lambda e: _with_signature(_body(e), stripe_wire.sign(_body(e), SECRET).split(",")[1]),
        **BAD_SIGNATURE,
    ),
    Case(
        "valid signature plus a second t= (ambiguous timestamp)",
        lambda e: _with_signature(_body(e), stripe_wire.sign(_body(e), SECRET) + f",t={now_s() - 1000}"),
        **BAD_SIGNATURE,
    ),
    Case("Stripe-Signature of 5 KB (valid one padded)", _padded_signature(5000), **BAD_SIGNATURE),
    Case(
        "Stripe-Signature of 9 KB (over gunicorn's 8190-byte field limit)",
        _padded_signature(9000),
        **GUNICORN_REFUSES,
    ),
    Case(
        "60 extra headers (over gunicorn's 50-field limit)",
        lambda e: Request(_body(e), {**signed_headers(_body(e)), **{f"X-Pad-{i}": "x" for i in range(60)}}),
        **GUNICORN_REFUSES,
    ),
    Case(
        "request line of 5 KB (over gunicorn's 4094-byte limit)",
        lambda e: Request(_body(e), signed_headers(_body(e)), path="/webhooks/stripe?" + "a" * 5000),
        status=414,
    ),
    Case(
        "once-valid delivery replayed 301 s later (stale t=)",
        lambda e: signed(_body(e), timestamp=now_s() - 301),
        **BAD_SIGNATURE,
    ),
    Case(
        "timestamp 1 h in the future", lambda e: signed(_body(e), timestamp=now_s() + 3600), **BAD_SIGNATURE
    ),
    Case(
        "signed with another endpoint's secret",
        lambda e: signed(_body(e), secret="whsec_other_endpoint"),
        **BAD_SIGNATURE,
    ),
    Case(
        "valid signature over a different body",
        lambda e: Request(_body(e), signed_headers(_body(samples.payment_events()[1]))),
        **BAD_SIGNATURE,
    ),
    Case(
        "body re-serialised after signing (whitespace changed)",
        lambda e: Request(json.dumps(e).encode(), signed_headers(_body(e))),
        **BAD_SIGNATURE,
    ),
    Case(
        "non-ASCII v1 value",
        lambda e: _with_signature(_body(e), f"t={now_s()},v1=é" + "a" * 63),
        **BAD_SIGNATURE,
    ),
    Case(
        "body not UTF-8 (validly signed bytes)",
        lambda e: _with_signature(b"\xff\xfe" + _body(e), hmac_header(b"\xff\xfe" + _body(e))),
        **BAD_SIGNATURE,
    ),
    Case(
        "gzip body (Content-Encoding: gzip), signature over the JSON",
        lambda e: Request(gzip.compress(_body(e)), {**signed_headers(_body(e)), "Content-Encoding": "gzip"}),
        **BAD_SIGNATURE,
    ),
    Case(
        "gzip body validly signed as bytes",
        lambda e: _with_signature(gzip.compress(_body(e)), hmac_header(gzip.compress(_body(e)))),
        **BAD_SIGNATURE,
    ),
    Case("signed body that is not JSON", lambda e: signed(b"event=paid&amount=3000"), **BAD_EVENT),
    Case("signed JSON array", lambda e: signed(json.dumps([e]).encode()), **BAD_EVENT),
    Case("signed JSON string", lambda e: signed(json.dumps(json.dumps(e)).encode()), **BAD_EVENT),
    Case("signed JSON nested 100 000 deep", lambda e: signed(b"[" * 100_000 + b"]" * 100_000), **BAD_EVENT),
    Case("signed event without id", _event_without("id"), **BAD_EVENT),
    Case("signed event without type", _event_without("type"), **BAD_EVENT),
    Case("signed event with a numeric id", _event_with("id", 42), **BAD_EVENT),
    Case("signed event whose data is not an object", _event_with("data", True), **BAD_EVENT),
    Case("signed event without data.object", _event_with("data", {"previous_attributes": {}}), **BAD_EVENT),
    Case("signed event id with a NUL", _event_with("id", "evt_1\x00"), **BAD_EVENT),
    Case(
        "signed live-mode event at a test-mode service (STRIPE_MODE=test)",
        _event_with("livemode", True),
        status=400,
        error="livemode_mismatch",
        writes={"webhook_failures": 1},  # signed and parsed: its refusal is recorded
    ),
    Case("signed event id of 1000 characters", _event_with("id", "evt_" + "a" * 996), **BAD_EVENT),
    Case(
        "signed body over 512 KiB (Content-Length)",
        lambda e: signed(_oversized(e)),
        status=413,
        error="body_too_large",
    ),
    Case(
        "signed body over 512 KiB, chunked (no Content-Length)",
        lambda e: Request(_oversized(e), signed_headers(_oversized(e)), chunked=True),
        status=413,
        error="body_too_large",
    ),
    # Not refusals: the signature, not an unsigned header, decides; these
    # prove the raw bytes are what is verified, however they are framed.
    Case(
        "validly signed, chunked within the limit",
        lambda e: Request(_body(e), signed_headers(_body(e)), chunked=True),
        status=200,
        writes=ONE_EVENT,
    ),
    Case(
        "validly signed, Content-Type text/plain",
        lambda e: _retyped(e, "text/plain"),
        status=200,
        writes=ONE_EVENT,
    ),
    Case(
        "validly signed, Content-Type application/x-www-form-urlencoded (no form parsing eats the body)",
        lambda e: _retyped(e, "application/x-www-form-urlencoded"),
        status=200,
        writes=ONE_EVENT,
    ),
    Case(
        "unsigned, Content-Type multipart/form-data",
        lambda e: Request(_body(e), {"Content-Type": "multipart/form-data; boundary=x"}),
        **BAD_SIGNATURE,
    ),
]


def send(port: int, request: Request) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("POST", request.path, skip_accept_encoding=True)
        length = len(request.body) + request.short_by
        framing = {"Transfer-Encoding": "chunked"} if request.chunked else {"Content-Length": str(length)}
        for name, value in {**request.headers, **framing}.items():
            conn.putheader(name, value)
        conn.endheaders()
        try:
            if request.chunked:
                for start in range(0, len(request.body), 8192):
                    chunk = request.body[start : start + 8192]
                    conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                conn.send(b"0\r\n\r\n")
            else:
                conn.send(request.body)
            if request.short_by:
                conn.sock.shutdown(socket.SHUT_WR)  # all it had: the body ends short
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was read: the answer is waiting
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def error_of(body: bytes) -> str | None:
    try:
        return json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None


# --- the rows that apply to every other provider, signed as it signs ---------

ONE_LEDGER_ROW = {"webhook_events": 1}


def _sent(
    sender: Sender,
    body: bytes,
    event_type: str = "test.hostile",
    drop: str | None = None,
    event_id: str | None = None,
    short_by: int = 0,
    **sign,
) -> Request:
    _, outgoing = sender.event(event_type, event_id)
    headers = sender.headers(body, outgoing, **sign)
    headers = {k: v for k, v in headers.items() if k.lower() != (drop or "").lower()}
    return Request(body, headers, path=sender.path, short_by=short_by)


def _signature_header(sender: Sender) -> str:
    _, outgoing = sender.event()
    return next(k for k in sender.headers(b"{}", outgoing) if "signature" in k.lower())


def provider_catalogue(sender: Sender) -> list[Case]:
    """The catalogue's rows for `sender`: each made from a JSON object body of its shape."""
    body = lambda p: json.dumps(p).encode()  # noqa: E731
    big = lambda p: body({**p, "padding": "x" * (512 * 1024)})  # noqa: E731
    rows = [
        Case(
            "signed with the rotated (second) secret",
            lambda p: _sent(sender, body(p), secret=sender.other_secret),
            status=200,
            writes=ONE_LEDGER_ROW,
        ),
        Case(
            "no signature header",
            lambda p: _sent(sender, body(p), drop=_signature_header(sender)),
            **BAD_SIGNATURE,
        ),
        Case(
            "signed with another endpoint's secret",
            lambda p: _sent(sender, body(p), secret=sender.foreign_secret),
            **BAD_SIGNATURE,
        ),
        Case(
            "valid signature over a different body",
            lambda p: Request(body(p), _sent(sender, body({**p, "x": 1})).headers, path=sender.path),
            **BAD_SIGNATURE,
        ),
        Case(
            "body re-serialised after signing (whitespace changed)",
            lambda p: Request(
                json.dumps(p, indent=1).encode(), _sent(sender, body(p)).headers, path=sender.path
            ),
            **BAD_SIGNATURE,
        ),
        Case("signed body that is not JSON", lambda p: _sent(sender, b"event=paid&amount=3000"), **BAD_EVENT),
        Case("signed JSON array", lambda p: _sent(sender, body([p])), **BAD_EVENT),
        Case(
            "signed JSON nested 100 000 deep",
            lambda p: _sent(sender, b"[" * 100_000 + b"]" * 100_000),
            **BAD_EVENT,
        ),
        Case(
            "signed dedupe id of 1000 characters",
            lambda p: _sent(sender, body(p), event_id="m" * 1000),
            **BAD_EVENT,
        ),
        Case("signed body over 512 KiB", lambda p: _sent(sender, big(p)), status=413, error="body_too_large"),
        Case(
            "signed body over 512 KiB, chunked",
            lambda p: Request(big(p), _sent(sender, big(p)).headers, chunked=True, path=sender.path),
            status=413,
            error="body_too_large",
        ),
        Case(
            "validly signed body 10 bytes shorter than its Content-Length",
            lambda p: _sent(sender, body(p), short_by=10),
            status=400,
            error="body_incomplete",
        ),
    ]
    return rows + _OWN_ROWS[sender.provider](sender, body)


def _standard_rows(sender: Sender, body) -> list[Case]:
    return [
        # The id is inside what is signed: without it nothing can be verified.
        Case("no webhook-id header", lambda p: _sent(sender, body(p), drop="webhook-id"), **BAD_SIGNATURE),
        Case(
            "no webhook-timestamp header",
            lambda p: _sent(sender, body(p), drop="webhook-timestamp"),
            **BAD_SIGNATURE,
        ),
        Case(
            "once-valid delivery replayed 301 s later (stale webhook-timestamp)",
            lambda p: _sent(sender, body(p), timestamp=now_s() - 301),
            **BAD_SIGNATURE,
        ),
        Case(
            "webhook-timestamp 301 s in the future",
            lambda p: _sent(sender, body(p), timestamp=now_s() + 301),
            **BAD_SIGNATURE,
        ),
        Case(
            "a malformed and a foreign signature item before the valid one",
            lambda p: _prefixed(_sent(sender, body(p)), "v1,not-base64! v1,bm90IG91cnM= "),
            status=200,
            writes=ONE_LEDGER_ROW,
        ),
        Case(
            "only a v2 item (a version this service does not know)",
            lambda p: _prefixed(_sent(sender, body(p)), "v2,", keep=False),
            **BAD_SIGNATURE,
        ),
        Case(
            "signed event without type",
            lambda p: _sent(sender, body({k: v for k, v in p.items() if k != "type"})),
            **BAD_EVENT,
        ),
    ]


def _prefixed(request: Request, prefix: str, keep: bool = True) -> Request:
    """`request` with `prefix` before its webhook-signature (or, not kept, instead of its `v1,`)."""
    valid = request.headers["webhook-signature"]
    value = prefix + valid if keep else prefix + valid.split(",", 1)[1]
    return Request(request.body, {**request.headers, "webhook-signature": value}, path=request.path)


def _github_rows(sender: Sender, body) -> list[Case]:
    return [
        Case(
            "no X-GitHub-Delivery header",
            lambda p: _sent(sender, body(p), drop="X-GitHub-Delivery"),
            **BAD_EVENT,
        ),
        Case(
            "no X-GitHub-Event header", lambda p: _sent(sender, body(p), drop="X-GitHub-Event"), **BAD_EVENT
        ),
        Case(
            "body not UTF-8 (validly signed bytes)",
            lambda p: _sent(sender, b"\xff\xfe" + body(p)),
            **BAD_SIGNATURE,
        ),
        # X-GitHub-Event is not signed: a captured body re-sent under another event's name.
        Case(
            "a validly signed body under another event's name (X-GitHub-Event: push)",
            lambda p: _sent(sender, body(p), event_type="push"),
            **BAD_EVENT,
        ),
        Case(
            "SHA-1 X-Hub-Signature only (the legacy header)",
            lambda p: Request(
                body(p),
                {"X-Hub-Signature": "sha1=" + "0" * 40, "X-GitHub-Delivery": "d1", "X-GitHub-Event": "push"},
                path=sender.path,
            ),
            **BAD_SIGNATURE,
        ),
    ]


_OWN_ROWS = {"standard": _standard_rows, "github": _github_rows}


# The 5xx answers by design to a validly signed delivery (docs/contract.md), never a crash: each
# retried by its sender and recorded as a failure of this class.
_BY_DESIGN_5XX = {
    # an api_version mutated out of the supported range, or away (tests/domains/stripe/test_api_version.py)
    "unsupported_api_version": "UnsupportedApiVersion",
    # a type mutated under an id already completed (tests/core/test_ledger.py); GitHub signs no header
    "event_id_reused": "EventIdReused",
    # a paid order whose amount was mutated away: its job would break its model
    # (tests/domains/stripe/test_paid_objects.py)
    "fulfilment_failed": "InvalidJob",
}


def by_design_5xx(db, error: str) -> bool:
    """Whether a 5xx with this `error` is one by design, its failure the last recorded."""
    failed = db.execute("SELECT error_class FROM webhook_failures ORDER BY id DESC LIMIT 1").fetchone()
    return error in _BY_DESIGN_5XX and failed == (_BY_DESIGN_5XX[error],)
