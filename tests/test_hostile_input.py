"""Hostile deliveries: each gets its expected status and writes nothing it should not.

The catalogue goes through real gunicorn on raw sockets, so its header limits
and HTTP parsing are part of what is tested; the property test mutates
headers and bodies at random in-process, where thousands of examples are cheap.
"""
from __future__ import annotations

import gzip
import hashlib
import hmac
import http.client
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import OTHER_SECRET, SECRET, signed_headers, table_counts
from tests.reliability import sized
from webhooks import samples, signature

JSON_TYPE = "application/json; charset=utf-8"


@dataclass(frozen=True)
class Request:
    body: bytes
    headers: dict[str, str]
    chunked: bool = False
    path: str = "/webhooks/stripe"


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[dict], Request]
    status: int
    error: str | None = None  # our JSON error code; None when gunicorn answers first
    writes: dict[str, int] = field(default_factory=dict)  # rows expected per table


def _now() -> int:
    return int(time.time())


def _body(evt: dict) -> bytes:
    return samples.encode(evt)


def _signed(body: bytes, **sign) -> Request:
    return Request(body, signed_headers(body, **sign))


def _with_signature(body: bytes, value: str) -> Request:
    return Request(body, {"Stripe-Signature": value, "Content-Type": JSON_TYPE})


def _hmac_header(body: bytes, secret: str = SECRET) -> str:
    """A v1 signature over raw bytes, which the stripe helper (str only) cannot make."""
    t = _now()
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def _retyped(evt: dict, content_type: str) -> Request:
    request = _signed(_body(evt))
    return Request(request.body, {**request.headers, "Content-Type": content_type})


def _oversized(evt: dict) -> bytes:
    evt["data"]["object"]["metadata"] = {"padding": "x" * (512 * 1024)}
    return _body(evt)


def _event_without(key: str) -> Callable[[dict], Request]:
    def make(evt: dict) -> Request:
        del evt[key]
        return _signed(_body(evt))

    return make


def _event_with(key: str, value) -> Callable[[dict], Request]:
    def make(evt: dict) -> Request:
        evt[key] = value
        return _signed(_body(evt))

    return make


def _padded_signature(size: int) -> Callable[[dict], Request]:
    def make(evt: dict) -> Request:
        body = _body(evt)
        return _with_signature(body, signature.sign(body, SECRET) + ",v0=" + "a" * size)

    return make


BAD_SIGNATURE = dict(status=400, error="invalid_signature")
BAD_EVENT = dict(status=400, error="invalid_event")
GUNICORN_REFUSES = dict(status=431, error=None)
ONE_EVENT = {"webhook_events": 1, "fulfilments": 1}

CATALOGUE = [
    Case("no Stripe-Signature header", lambda e: Request(_body(e), {"Content-Type": JSON_TYPE}), **BAD_SIGNATURE),
    Case("empty Stripe-Signature", lambda e: _with_signature(_body(e), ""), **BAD_SIGNATURE),
    Case("malformed Stripe-Signature (t=abc,v1)", lambda e: _with_signature(_body(e), "t=abc,v1"), **BAD_SIGNATURE),
    Case(
        "signature without a timestamp",
        lambda e: _with_signature(_body(e), signature.sign(_body(e), SECRET).split(",")[1]),
        **BAD_SIGNATURE,
    ),
    Case(
        "valid signature plus a second t= (ambiguous timestamp)",
        lambda e: _with_signature(_body(e), signature.sign(_body(e), SECRET) + f",t={_now() - 1000}"),
        **BAD_SIGNATURE,
    ),
    Case("Stripe-Signature of 5 KB (valid one padded)", _padded_signature(5000), **BAD_SIGNATURE),
    Case("Stripe-Signature of 9 KB (over gunicorn's 8190-byte field limit)", _padded_signature(9000),
         **GUNICORN_REFUSES),
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
        lambda e: _signed(_body(e), timestamp=_now() - 301),
        **BAD_SIGNATURE,
    ),
    Case("timestamp 1 h in the future", lambda e: _signed(_body(e), timestamp=_now() + 3600), **BAD_SIGNATURE),
    Case("signed with another endpoint's secret", lambda e: _signed(_body(e), secret="whsec_other_endpoint"),
         **BAD_SIGNATURE),
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
    Case("non-ASCII v1 value", lambda e: _with_signature(_body(e), f"t={_now()},v1=é" + "a" * 63), **BAD_SIGNATURE),
    Case(
        "body not UTF-8 (validly signed bytes)",
        lambda e: _with_signature(b"\xff\xfe" + _body(e), _hmac_header(b"\xff\xfe" + _body(e))),
        **BAD_SIGNATURE,
    ),
    Case(
        "gzip body (Content-Encoding: gzip), signature over the JSON",
        lambda e: Request(gzip.compress(_body(e)), {**signed_headers(_body(e)), "Content-Encoding": "gzip"}),
        **BAD_SIGNATURE,
    ),
    Case(
        "gzip body validly signed as bytes",
        lambda e: _with_signature(gzip.compress(_body(e)), _hmac_header(gzip.compress(_body(e)))),
        **BAD_SIGNATURE,
    ),
    Case("signed body that is not JSON", lambda e: _signed(b"event=paid&amount=3000"), **BAD_EVENT),
    Case("signed JSON array", lambda e: _signed(json.dumps([e]).encode()), **BAD_EVENT),
    Case("signed JSON string", lambda e: _signed(json.dumps(json.dumps(e)).encode()), **BAD_EVENT),
    Case("signed JSON nested 100 000 deep", lambda e: _signed(b"[" * 100_000 + b"]" * 100_000), **BAD_EVENT),
    Case("signed event without id", _event_without("id"), **BAD_EVENT),
    Case("signed event without type", _event_without("type"), **BAD_EVENT),
    Case("signed event with a numeric id", _event_with("id", 42), **BAD_EVENT),
    Case("signed event whose data is not an object", _event_with("data", True), **BAD_EVENT),
    Case("signed event without data.object", _event_with("data", {"previous_attributes": {}}), **BAD_EVENT),
    Case("signed event id with a NUL", _event_with("id", "evt_1\x00"), **BAD_EVENT),
    Case("signed event id of 1000 characters", _event_with("id", "evt_" + "a" * 996), **BAD_EVENT),
    Case("signed body over 512 KiB (Content-Length)", lambda e: _signed(_oversized(e)), status=413,
         error="body_too_large"),
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
    Case("validly signed, Content-Type text/plain", lambda e: _retyped(e, "text/plain"), status=200,
         writes=ONE_EVENT),
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


def _send(port: int, request: Request) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("POST", request.path, skip_accept_encoding=True)
        framing = {"Transfer-Encoding": "chunked"} if request.chunked else {"Content-Length": str(len(request.body))}
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
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was read: the answer is waiting
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _error_of(body: bytes) -> str | None:
    try:
        return json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None


def _expected_counts(before: dict[str, int], writes: dict[str, int]) -> dict[str, int]:
    return {table: count + writes.get(table, 0) for table, count in before.items()}


def test_hostile_input_catalogue_is_refused_with_its_status_and_writes_nothing(
    gunicorn, db, subtests, figures
):
    server = gunicorn(WEB_CONCURRENCY=2)
    for case in CATALOGUE:
        with subtests.test(case.name):
            before = table_counts(db)
            status, body = _send(server.port, case.make(samples.payment_events()[1]))
            after = table_counts(db)
            assert (status, _error_of(body)) == (case.status, case.error), body[:200]
            assert after == _expected_counts(before, case.writes)
            written = {t: after[t] - before[t] for t in after if after[t] != before[t]}
            figures.record(
                case.name,
                f"{case.status} {case.error or '(gunicorn)'}; "
                + (f"writes exactly {case.writes}" if case.writes else "ledger and fulfilments unchanged"),
                f"{status} {_error_of(body) or ''}; rows written: {written or 'none'}",
            )


# --- property: random mutations of a signed delivery ------------------------


def _stripe_scheme_valid(body: bytes, header: str | None, now: float, tolerance: int = 300) -> bool:
    """The test's own reading of Stripe's scheme, independent of webhooks.signature:
    HMAC-SHA256 of "{t}.{body}" under a configured secret equals a v1 item, for the
    first t item, signed no longer than `tolerance` ago."""
    if not header:
        return False
    items = [item.split("=", 1) for item in header.split(",")]
    stamps = [v[0] for k, *v in items if k == "t" and v]
    try:
        t = int(stamps[0])
    except (IndexError, ValueError):
        return False
    if t < now - tolerance:
        return False
    v1 = {v[0] for k, *v in items if k == "v1" and v}
    for secret in (SECRET, OTHER_SECRET):
        expected = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
        if expected in v1:
            return True
    return False


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_HEADER_CHARS = st.characters(min_codepoint=32, max_codepoint=126)


@st.composite
def _mutated_body(draw, body: bytes) -> bytes:
    kind = draw(st.sampled_from(["same", "flip", "insert", "cut", "bytes", "json", "field"]))
    at = draw(st.integers(0, len(body) - 1))
    if kind == "flip":
        return body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1 :]
    if kind == "insert":
        return body[:at] + draw(st.binary(min_size=1, max_size=8)) + body[at:]
    if kind == "cut":
        return body[:at] + body[at + draw(st.integers(1, 64)) :]
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(_JSON)).encode()
    if kind == "field":
        evt = json.loads(body)
        evt[draw(st.sampled_from(["id", "type", "object", "data", "account", "created", "livemode"]))] = draw(_JSON)
        return json.dumps(evt).encode()
    return body


@st.composite
def _mutated_header(draw, header: str) -> str | None:
    kind = draw(st.sampled_from(["same", "drop", "text", "edit", "item"]))
    if kind == "drop":
        return None
    if kind == "text":
        return draw(st.text(_HEADER_CHARS, max_size=120))
    if kind == "edit":
        at = draw(st.integers(0, len(header) - 1))
        return header[:at] + draw(st.text(_HEADER_CHARS, max_size=3)) + header[at + 1 :]
    if kind == "item":
        items = header.split(",")
        item = draw(
            st.sampled_from([f"t={_now()}", f"t={_now() - 400}", "v1=" + "0" * 64, "v0=abc", "t", "v1", ""])
            | st.text(_HEADER_CHARS, max_size=20)
        )
        items.insert(draw(st.integers(0, len(items))), item)
        return ",".join(items)
    return header


@st.composite
def _deliveries(draw) -> tuple[bytes, str | None]:
    original = _body(samples.payment_events()[draw(st.integers(0, 2))])
    body = draw(_mutated_body(original))
    signed_body = body if draw(st.booleans()) else original
    secret = draw(st.sampled_from([SECRET, OTHER_SECRET, "whsec_not_ours"]))
    skew = draw(st.sampled_from([0, -60, -400, 400]) | st.integers(-1000, 1000))
    try:
        header = signature.sign(signed_body, secret, _now() + skew)
    except UnicodeDecodeError:  # the stripe helper signs text only
        header = _hmac_header(signed_body, secret)
    return body, draw(_mutated_header(header))


def test_mutated_deliveries_never_get_a_5xx_nor_write_without_a_valid_signature(client, db, figures):
    statuses: Counter[int] = Counter()
    written: Counter[bool] = Counter()

    @settings(
        max_examples=sized(300, 5000),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(_deliveries())
    def deliver(delivery: tuple[bytes, str | None]) -> None:
        body, header = delivery
        now = time.time()
        before = table_counts(db)
        headers = {"Content-Type": JSON_TYPE, **({"Stripe-Signature": header} if header is not None else {})}
        status = client.post("/webhooks/stripe", data=body, headers=headers).status_code
        wrote = table_counts(db) != before
        statuses[status] += 1
        assert status < 500
        if wrote:
            assert _stripe_scheme_valid(body, header, now), (status, header)
            written[True] += 1

    deliver()
    figures.record(
        f"{sum(statuses.values())} random mutations of signed deliveries (hypothesis: body bytes, "
        "JSON fields, signature items, secrets, clock skew)",
        "never a 5xx; a row is only written for a delivery whose signature the test's own HMAC "
        "check accepts",
        f"statuses {dict(sorted(statuses.items()))}; {written[True]} deliveries wrote, all validly signed",
        examples=sum(statuses.values()),
    )
