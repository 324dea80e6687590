"""Hostile deliveries: each gets its expected status and writes nothing it should not.

The catalogue goes through real gunicorn on raw sockets, so its header limits
and HTTP parsing are part of what is tested; the property test mutates
headers and bodies at random in-process, where thousands of examples are cheap.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import OTHER_SECRET, SECRET, table_counts
from tests.support.hostile import (
    CATALOGUE,
    JSON_TYPE,
    by_design_5xx,
    error_of,
    hmac_header,
    now_s,
    provider_catalogue,
    send,
    v1_digest,
)
from tests.support.reliability import sized
from tests.support.senders import SENDERS
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples


def _expected_counts(before: dict[str, int], writes: dict[str, int]) -> dict[str, int]:
    return {table: count + writes.get(table, 0) for table, count in before.items()}


def test_hostile_input_catalogue_is_refused_with_its_status_and_writes_nothing(
    gunicorn, db, subtests, figures
):
    server = gunicorn(WEB_CONCURRENCY=2)
    for case in CATALOGUE:
        with subtests.test(case.name):
            before = table_counts(db)
            status, body = send(server.port, case.make(samples.payment_events()[1]))
            after = table_counts(db)
            assert (status, error_of(body)) == (case.status, case.error), body[:200]
            assert after == _expected_counts(before, case.writes)
            written = {t: after[t] - before[t] for t in after if after[t] != before[t]}
            figures.record(
                case.name,
                f"{case.status} {case.error or ('from gunicorn' if case.status >= 400 else '')}; "
                + (f"writes exactly {case.writes}" if case.writes else "ledger and fulfilments unchanged"),
                f"{status} {error_of(body) or ''}; rows written: {written or 'none'}",
            )


@pytest.mark.parametrize("sender", SENDERS, ids=lambda s: s.provider)
def test_each_providers_hostile_rows_get_their_status_and_write_nothing(gunicorn, db, subtests, sender):
    server = gunicorn(WEB_CONCURRENCY=2)
    for case in provider_catalogue(sender):
        with subtests.test(f"{sender.provider}: {case.name}"):
            before = table_counts(db)
            status, body = send(server.port, case.make(sender.payload("test.hostile")))
            assert (status, error_of(body)) == (case.status, case.error), body[:200]
            assert table_counts(db) == _expected_counts(before, case.writes)


# --- property: random mutations of a signed delivery ------------------------


def _stripe_scheme_valid(body: bytes, header: str | None, now: float, tolerance: int = 300) -> bool:
    """The test's own reading of Stripe's scheme, independent of webhooks.providers.stripe:
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
    return any(v1_digest(body, secret, t) in v1 for secret in (SECRET, OTHER_SECRET))


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
        evt[draw(st.sampled_from(["id", "type", "object", "data", "account", "created", "livemode"]))] = draw(
            _JSON
        )
        return json.dumps(evt).encode()
    return body


@st.composite
def mutated_header(draw, header: str, separator: str, items: list[str]) -> str | None:
    """`header` kept, dropped, replaced, edited, or with one of `items` put among its parts."""
    kind = draw(st.sampled_from(["same", "drop", "text", "edit", "item"]))
    if kind == "drop":
        return None
    if kind == "text":
        return draw(st.text(_HEADER_CHARS, max_size=120))
    if kind == "edit":
        at = draw(st.integers(0, len(header) - 1))
        return header[:at] + draw(st.text(_HEADER_CHARS, max_size=3)) + header[at + 1 :]
    if kind == "item":
        parts = header.split(separator)
        item = draw(st.sampled_from(items) | st.text(_HEADER_CHARS, max_size=20))
        parts.insert(draw(st.integers(0, len(parts))), item)
        return separator.join(parts)
    return header


def _mutated_header(header: str):
    stripe_items = [f"t={now_s()}", f"t={now_s() - 400}", "v1=" + "0" * 64, "v0=abc", "t", "v1", ""]
    return mutated_header(header, ",", stripe_items)


@st.composite
def _deliveries(draw) -> tuple[bytes, str | None]:
    original = samples.encode(samples.payment_events()[draw(st.integers(0, 2))])
    body = draw(_mutated_body(original))
    signed_body = body if draw(st.booleans()) else original
    secret = draw(st.sampled_from([SECRET, OTHER_SECRET, "whsec_not_ours"]))
    skew = draw(st.sampled_from([0, -60, -400, 400]) | st.integers(-1000, 1000))
    try:
        header = stripe_wire.sign(signed_body, secret, now_s() + skew)
    except UnicodeDecodeError:  # the stripe helper signs text only
        header = hmac_header(signed_body, secret)
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
        response = client.post("/webhooks/stripe", data=body, headers=headers)
        status = response.status_code
        wrote = table_counts(db) != before
        statuses[status] += 1
        assert status < 500 or by_design_5xx(db, response.get_json()["error"]), response.get_json()
        if wrote:
            assert _stripe_scheme_valid(body, header, now), (status, header)
            written[True] += 1

    deliver()
    figures.record(
        f"{sum(statuses.values())} random mutations of signed deliveries (hypothesis: body bytes, "
        "JSON fields, signature items, secrets, clock skew)",
        "never a 5xx but those by design (an api_version or a paid order's amount mutated away, a type "
        "under an id already completed; signed validly, recorded); a row is only written for a delivery "
        "whose signature the test's own HMAC check accepts",
        f"statuses {dict(sorted(statuses.items()))}; {written[True]} deliveries wrote, all validly signed",
        examples=sum(statuses.values()),
    )
