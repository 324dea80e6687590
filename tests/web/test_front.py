"""The public URL through its front (`python -m webhooks serve`: nginx, then gunicorn's stock gthread).

Each test sends the raw bytes that took the home-made buffering layer down
(issue 23) and asserts what the served stack makes of them: a 4xx at once,
or a connection held by the front and cut after the read timeout; never a
gunicorn thread held, a 5xx or a traceback. Signed deliveries and /healthz
are timed meanwhile. The front's timeouts are short here, so that its cuts
come within the test.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import psutil
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import framing
from tests.support.front import (
    address,
    assert_quiet,
    counted_since,
    deliver,
    refusals,
    served,
    served_meanwhile,
    signed_delivery,
    until_cut,
)
from tests.support.reliability import sized
from tests.web.test_metrics import scrape, value

# Every wait for a cut here is a multiple of it: short in CI, the longer one under --full.
READ_TIMEOUT_S = sized(2, 3)


# Every test here goes through nginx in front of gunicorn, and bounds how long an answer
# takes: no other test runs beside one (`alone`).
pytestmark = [pytest.mark.system, pytest.mark.alone]


@pytest.fixture(scope="module")
def stack(server_url):
    """One served stack for the module: every test here leaves it as it found it."""
    with served(server_url, WEB_CONCURRENCY=2, WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS=READ_TIMEOUT_S) as server:
        yield server


def test_a_negative_chunk_size_is_refused_at_once_and_freezes_no_worker(stack, figures):
    answers = [framing.exchange(address(stack), framing.NEGATIVE_CHUNK) for _ in range(4)]

    assert [a.status() for a in answers] == [400] * 4
    assert max(a.first_byte_s for a in answers) < 1
    slowest, healthz_s = served_meanwhile(stack)
    assert slowest < 1 and healthz_s < 1
    assert_quiet(stack)
    figures.record(
        "4 requests whose chunk size is -6 (the 75 bytes that froze a worker for 30 s)",
        "each answered 400 at once; deliveries and /healthz right after answered within 1 s",
        f"400 after {max(a.first_byte_s for a in answers) * 1000:.0f} ms at most; next delivery "
        f"{slowest * 1000:.0f} ms, /healthz {healthz_s * 1000:.0f} ms",
    )


def test_over_cap_chunk_sizes_held_open_hold_no_thread(stack, figures):
    with framing.Held(address(stack), framing.OVER_CAP_CHUNK, 32) as held:
        slowest, healthz_s = served_meanwhile(stack)
        cut_s = until_cut(held, READ_TIMEOUT_S + 3)

    assert slowest < 1 and healthz_s < 1
    figures.record(
        f"32 connections sending a chunk size over the body cap (FFFFFFF) and then nothing "
        f"(read timeout {READ_TIMEOUT_S} s)",
        "signed deliveries and /healthz answered within 1 s while they are held; each cut by the "
        "front within the read timeout",
        f"slowest delivery {slowest * 1000:.0f} ms, /healthz {healthz_s * 1000:.0f} ms; all 32 "
        f"cut {cut_s:.1f} s after",
    )


def test_an_endless_request_head_is_refused_at_once(stack, figures):
    answer = framing.exchange(address(stack), framing.ENDLESS_HEAD)

    assert answer.status() == 431 and answer.first_byte_s < 1
    assert json.loads(answer.body()) == {"error": "headers_too_large"}
    figures.record(
        "a request head over 64 KiB with no blank line, held open",
        "431 headers_too_large from the front at once",
        f"{answer.status()} after {answer.first_byte_s * 1000:.0f} ms",
    )


def test_unread_pipelines_hold_no_thread_and_end(stack, figures):
    # More of them than gunicorn has threads (2 workers of 8), each with more
    # answers coming than socket buffers hold.
    with framing.Held(address(stack), framing.HEALTHZ * 20_000, 20) as held:
        slowest, healthz_s = served_meanwhile(stack)
        ended_s = until_cut(held, 30)
        answered = [data.count(b"HTTP/1.1 200") for data in held.received]

    assert slowest < 1 and healthz_s < 1
    # The front reads gunicorn's answers whole, so no thread waits on a client
    # that does not read; it answers a connection's first 1,000 requests
    # (keepalive_requests), or fewer if the client's window fills before its
    # send timeout, and closes it.
    assert max(answered) <= 1000
    figures.record(
        "20 connections (more than gunicorn's 16 threads) pipelining 20 000 GET /healthz each and "
        "reading no answer until the front ends them",
        "signed deliveries and /healthz answered within 1 s meanwhile; the front answers at most "
        "1,000 requests per connection, then closes it",
        f"slowest delivery {slowest * 1000:.0f} ms, /healthz {healthz_s * 1000:.0f} ms; all 20 ended "
        f"{ended_s:.1f} s after, {min(answered)}-{max(answered)} answers each",
    )


def test_a_4_mib_pipeline_is_answered_at_speed(stack, figures):
    answers, seconds, ended = framing.pipeline(address(stack), framing.HEALTHZ, 4 << 20)

    # nginx answers 1,000 requests on a connection (keepalive_requests), then closes it.
    assert answers >= 1000 and ended != "open"
    assert answers / seconds >= 500
    figures.record(
        "a 4 MiB pipeline of GET /healthz, its answers read as they come",
        "answered at 500/s or more (the home-made layer: 72/s); the connection ends, nothing held",
        f"{answers} answers in {seconds:.2f} s ({answers / seconds:.0f}/s), then the connection {ended}",
    )


def _memory_mib(server) -> float:
    """Resident memory of nginx's and gunicorn's processes under `python -m webhooks serve`."""
    parent = psutil.Process(server.proc.pid)
    return sum(p.memory_info().rss for p in parent.children(recursive=True)) / (1 << 20)


def test_chunk_extensions_and_trailers_neither_grow_memory_nor_stop_a_delivery(stack, figures):
    before = _memory_mib(stack)
    answers = []
    for extension, trailer in ((b";" + b"e" * (1 << 20), b""), (b"", b"X-Trailer: t\r\n" * 600_000)):
        event_id, body, headers = signed_delivery()
        answers.append(
            framing.exchange(address(stack), framing.chunked(headers, body, extension, trailer), wait_s=30)
        )
        assert answers[-1].status() == 200 and json.loads(answers[-1].body())["event_id"] == event_id
    grown = _memory_mib(stack) - before

    assert grown < 16
    figures.record(
        "signed deliveries chunked in 16 pieces, each size line with a 1 MiB extension; then one with "
        "8 MiB of trailers",
        "the front reads past them: each delivered 200; nginx and gunicorn grow by less than 16 MiB "
        "(the home-made layer buffered 19-25 MB per connection)",
        f"200 after {answers[0].first_byte_s:.2f} s and {answers[1].first_byte_s:.2f} s; memory grew "
        f"{grown:.1f} MiB",
    )


def test_malformed_chunked_bodies_get_a_4xx_without_a_traceback_and_are_counted(stack, figures):
    before = refusals(stack)
    answers = {
        name: framing.exchange(address(stack), data) for name, data in framing.MALFORMED_CHUNKED.items()
    }
    counted = counted_since(stack, before, len(answers))

    statuses = {name: answer.status() for name, answer in answers.items()}
    assert all(status is not None and 400 <= status < 500 for status in statuses.values()), statuses
    assert all(json.loads(answer.body())["error"] for answer in answers.values())
    assert sum(counted.values()) == len(answers)
    assert_quiet(stack)
    figures.record(
        f"{len(answers)} malformed chunked bodies: {', '.join(answers)}",
        "each a 4xx with a JSON error, counted in webhook_front_refusals_total; no 5xx, no traceback",
        ", ".join(f"{status}" for status in statuses.values()) + f"; counted {dict(counted)}",
    )


def test_expect_100_continue_is_answered_once_and_never_to_http_1_0(stack, figures):
    continued = {}
    for version in ("1.1", "1.0"):
        _event_id, body, headers = signed_delivery()
        head, body = framing.expect_continue(version, headers, body)
        continued[version] = framing.exchange(address(stack), head, then=body, pause_s=0.3)

    assert continued["1.1"].statuses() == [100, 200]
    assert continued["1.0"].statuses() == [200]
    figures.record(
        "signed deliveries sending Expect: 100-continue, as HTTP/1.1 and as HTTP/1.0",
        "one 100 Continue for HTTP/1.1 (the home-made layer sent two), none for HTTP/1.0; both 200",
        f"HTTP/1.1: {continued['1.1'].statuses()}; HTTP/1.0: {continued['1.0'].statuses()}",
    )


def test_a_bare_lf_request_is_answered_at_once_and_the_next_one_too(stack, figures):
    # RFC 9112 (2.2) lets a server read a lone LF as a line end; nginx does, and
    # hands gunicorn the request re-framed, so no one reads it otherwise.
    answer = framing.exchange(address(stack), framing.BARE_LF + framing.HEALTHZ)

    assert answer.statuses() == [200, 200] and answer.first_byte_s < 1
    figures.record(
        "GET /healthz with lines ended by LF alone, then a CRLF request pipelined behind it",
        "answered at once (the home-made layer waited 10 s for a 408), and the next request too: "
        "nothing desynchronised",
        f"{answer.statuses()} after {answer.first_byte_s * 1000:.0f} ms",
    )


def test_every_request_refused_before_the_app_is_counted_by_reason(stack, figures):
    sixty_headers = (
        framing.HEAD + b"".join(b"X-%d: a\r\n" % n for n in range(60)) + b"Content-Length: 0\r\n\r\n"
    )
    sent = {
        "400": framing.MALFORMED_CHUNKED["chunk size not hex"],
        "413": framing.HEAD + b"Content-Length: 600000\r\n\r\n",
        "414": b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: hostile\r\n\r\n",  # gunicorn's limit
        "431": framing.ENDLESS_HEAD,
    }
    before = refusals(stack)
    answered = {
        status: framing.exchange(address(stack), data, quiet_s=0.2).status() for status, data in sent.items()
    }
    # Over gunicorn's 50 header fields: gunicorn's parser refuses it, not nginx.
    answered["431 (gunicorn)"] = framing.exchange(address(stack), sixty_headers, quiet_s=0.2).status()
    with framing.Held(address(stack), framing.HEAD[:20], 1) as held:  # a head that never ends
        until_cut(held, READ_TIMEOUT_S + 3)
    counted = counted_since(stack, before, 6)

    assert answered == {"400": 400, "413": 413, "414": 414, "431": 431, "431 (gunicorn)": 431}
    assert counted == Counter({"400": 1, "413": 1, "414": 1, "431": 2, "408": 1})
    page = requests.get(stack.metrics_url, timeout=10).text
    assert value(scrape(page), "webhook_front_refusals_total", status="413", reason="body_too_large") >= 1
    figures.record(
        "a malformed chunk size, a body over the cap, a 5 KB request line, an endless head, 60 headers "
        "(gunicorn's limit), a head never finished",
        "each counted once in webhook_front_refusals_total{status,reason}, whether nginx or "
        "gunicorn's parser refused it",
        f"counted {dict(sorted(counted.items()))}",
    )


def test_metrics_are_served_on_the_scrapers_listener_not_the_public_url(stack):
    public = requests.get(stack.url + "/metrics", timeout=10)
    assert public.status_code == 404 and "webhook_" not in public.text
    assert "webhook_front_refusals_total" in requests.get(stack.metrics_url, timeout=10).text


def test_a_client_over_its_connection_limit_is_refused_and_others_are_served(front, figures):
    per_client = 20
    server = front(WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT=per_client)
    # Heads sent, bodies never: each counts against its client's limit.
    stalled = framing.HEAD + b"Content-Length: 1000\r\n\r\n"
    with framing.Held(address(server), stalled, per_client + 10, source="127.0.0.2") as held:
        time.sleep(0.5)
        held.poll()
        slowest, healthz_s = served_meanwhile(server)
        statuses = Counter(held.statuses())

    assert statuses == Counter({None: per_client, 429: 10})
    assert slowest < 1 and healthz_s < 1
    figures.record(
        f"{per_client + 10} connections from one address that send a head and no body "
        f"(WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT={per_client})",
        "the ones over the limit answered 429 at once; another address's deliveries and /healthz "
        "answered within 1 s",
        f"{statuses[429]} answered 429, {statuses[None]} held; slowest delivery {slowest * 1000:.0f} ms",
    )


# --- fuzz: hostile framings of every kind, each followed by a signed delivery ---

_EVENT_ID = re.compile(rb'"event_id":\s*"([^"]+)"')
_EOL = st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"])
_SIZE = st.one_of(st.integers(0, 80), st.integers(-8, -1), st.sampled_from([0xFFFFFFF, 2**63, 2**64 + 1]))
_SIZE_LINE = st.builds(
    lambda n, form: form % n, _SIZE, st.sampled_from([b"%x", b"%X", b"0x%x", b"%08x", b" %x", b"%x ", b"+%x"])
)
_EXTENSION = st.one_of(
    st.just(b""),
    st.binary(max_size=24).map(lambda b: b";" + b),
    st.integers(1, 70_000).map(lambda n: b";e=" + b"x" * n),
)
_CHUNK = st.builds(
    lambda size, ext, eol, data, end: size + ext + eol + data + end,
    _SIZE_LINE,
    _EXTENSION,
    _EOL,
    st.binary(max_size=90),
    _EOL,
)
_TRAILER = st.one_of(
    st.just(b"X-Trailer: t"),
    st.binary(max_size=30),
    st.just(b" folded"),
    st.integers(1, 70_000).map(lambda n: b"X-Long: " + b"t" * n),
)
_FRAMING = st.sampled_from(
    [
        b"Content-Length: 0",
        b"Content-Length: 5",
        b"Content-Length: 90",
        b"Content-Length: -1",
        b"Content-Length: 99999999999999999999",
        b"Content-Length: 5, 5",
        b"Content-Length: +5",
        b"Content-Length: 5\r\nContent-Length: 6",
        b"Transfer-Encoding: chunked",
        b"Transfer-Encoding: Chunked",
        b"Transfer-Encoding: gzip, chunked",
        b"Transfer-Encoding: chunked, chunked",
        b"Transfer-Encoding: identity",
        b"Transfer-Encoding:\x0bchunked",
        b"Transfer-Encoding : chunked",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
        b"X-Folded: a\r\n b",
        b" X-Leading: a",
        b"X-Folded: a\r\n\tTransfer-Encoding: chunked",
        b"Expect: 100-continue",
        b"Connection: close",
        b"Connection: keep-alive",
        b"Host: second",
    ]
)
_REQUEST_LINE = st.sampled_from(
    [
        b"POST /webhooks/stripe HTTP/1.1",
        b"POST /webhooks/stripe HTTP/1.0",
        b"GET /healthz HTTP/1.1",
        b"POST  /webhooks/stripe HTTP/1.1",
        b"POST /webhooks/stripe HTTP/1.1 ",
        b"POST /webhooks/stripe",
        b"POST /webhooks/stripe HTTP/2.0",
        b"POST /webhooks/stripe HTTP/1.9",
        b"GET /healthz",
    ]
)


_VALID_TRAILER = st.sampled_from(
    [b"X-Trailer: t", b"Stripe-Signature: t=1,v1=00", b"Content-Length: 5", b"Transfer-Encoding: chunked"]
)


@st.composite
def hostile_requests(draw) -> bytes:
    """Well-framed bodies with hostile headers, extensions and trailers (what a smuggler
    sends), or framing broken anywhere (what a fuzzer sends)."""
    line = draw(st.one_of(st.just(b"POST /webhooks/stripe HTTP/1.1"), _REQUEST_LINE))
    headers = draw(st.lists(_FRAMING, max_size=3))
    if draw(st.booleans()):
        data = draw(st.lists(st.binary(min_size=1, max_size=60), max_size=3))
        if draw(st.booleans()):
            headers.insert(draw(st.integers(0, len(headers))), b"Transfer-Encoding: chunked")
            body = b"".join(b"%x%s\r\n%s\r\n" % (len(d), draw(_EXTENSION), d) for d in data)
            body += b"0" + draw(_EXTENSION) + b"\r\n"
            body += b"".join(t + b"\r\n" for t in draw(st.lists(_VALID_TRAILER, max_size=2))) + b"\r\n"
        else:
            body = b"".join(data)
            headers.insert(draw(st.integers(0, len(headers))), b"Content-Length: %d" % len(body))
        eol = b"\r\n"
    else:
        eol = draw(_EOL)
        if draw(st.booleans()):
            chunks = b"".join(draw(st.lists(_CHUNK, max_size=4)))
            trailers = b"".join(t + draw(_EOL) for t in draw(st.lists(_TRAILER, max_size=3)))
            body = chunks + (
                b"0" + draw(_EXTENSION) + draw(_EOL) + trailers + draw(_EOL) if draw(st.booleans()) else b""
            )
        else:
            body = draw(st.binary(max_size=120))
    return eol.join([line, b"Host: fuzz", *headers]) + eol + eol + body


def test_hostile_framings_never_get_a_5xx_a_hang_or_a_desync(stack, figures):
    """Each hostile request is pipelined before a signed delivery and half-closed; then
    another signed delivery comes on a connection of its own. No answer may be a 5xx; the
    front must end the exchange within the read timeout; an answer naming an event may
    only name the delivery's; and the delivery after must get its own 200."""
    examples, statuses, behind = [], Counter(), []
    started = time.monotonic()

    @settings(
        max_examples=sized(150, 1500),
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
        ],
    )
    @given(hostile=hostile_requests())
    def exchange_then_deliver(hostile: bytes):
        event_id, body, headers = signed_delivery()
        delivery = (
            f"POST /webhooks/stripe HTTP/1.1\r\nHost: fuzz\r\nContent-Length: {len(body)}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + "\r\n"
        ).encode() + body
        answer = framing.exchange(
            address(stack),
            hostile + delivery,
            wait_s=READ_TIMEOUT_S + 2,
            quiet_s=READ_TIMEOUT_S + 2,
            half_close=True,
        )
        examples.append(answer)
        statuses.update(answer.statuses())
        assert not [s for s in answer.statuses() if s >= 500], answer.data[:300]
        assert answer.ended != "open", "the front held a half-closed exchange past the read timeout"
        named = {found.decode() for found in _EVENT_ID.findall(answer.data)}
        assert named <= {event_id}, answer.data[:300]
        behind.append(bool(named))
        deliver(stack)

    exchange_then_deliver()
    seconds = time.monotonic() - started
    assert_quiet(stack)
    figures.record(
        f"{len(examples)} hostile framings (hypothesis over raw bytes: chunk sizes, extensions, "
        "trailers, header folding, Content-Length and Transfer-Encoding combinations, bare CR/LF, "
        "request lines), each pipelined before a signed delivery and half-closed",
        "never a 5xx; every exchange ended within the read timeout; no answer for an event other "
        "than the pipelined delivery's; a signed delivery right after each got its own 200; no traceback",
        f"{len(examples)} exchanges in {seconds:.0f} s; statuses {dict(sorted(statuses.items()))}; the "
        f"pipelined delivery answered behind {sum(behind)} of them",
        examples=len(examples),
        seconds=seconds,
    )
