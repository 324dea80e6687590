"""The served stack (`python -m webhooks serve`, bin/serve: nginx in front of gunicorn) against
clients that do not send their request, or do not read their answer: they cost the front a
connection and no gunicorn thread, so deliveries go on."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from bench import framing, slow_clients
from tests.conftest import ROOT, SECRET, SERVE, Gunicorn, service_env, signed_headers, table_counts
from tests.support.front import address, assert_quiet, counted_since, deliver, healthz, refusals
from tests.support.reliability import sized
from webhooks.traffic import samples


# The tests through the front time their answers: no other test runs beside one (`alone`).
@pytest.mark.alone
def test_slow_clients_hold_no_thread_and_never_stall_deliveries(front, db, figures):
    trickle, silent = 200, 200
    seconds, read_timeout_s = sized((6, 2), (60, 10))
    server = front(WEB_CONCURRENCY=os.cpu_count(), WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS=read_timeout_s)
    report = slow_clients.run(server.url, SECRET, seconds, trickle, silent)

    assert set(report.statuses) == {"200"}
    assert report.p99_ms() <= 1000
    # A silent one stalls longer than the timeout between two reads, and is cut.
    # A trickling one never does: the front holds it, a connection and no thread.
    assert len(report.cut_after_s) >= silent
    assert max(report.cut_after_s) <= read_timeout_s + 1.5
    assert_quiet(server)
    figures.record(
        f"{trickle} connections trickling one body byte per second and {silent} sending headers "
        f"and no body, each re-opened when cut, for {seconds} s (read timeout {read_timeout_s} s)",
        "valid deliveries sent meanwhile answered 200 with p99 <= 1 s; the front holds every slow "
        "connection (no gunicorn thread) and cuts the ones stalled longer than the read timeout; "
        "no worker killed, no error logged",
        f"{len(report.latencies_ms)} deliveries, p99 {report.p99_ms():.0f} ms, max "
        f"{max(report.latencies_ms):.0f} ms; {report.opened} slow connections opened, "
        f"{len(report.cut_after_s)} cut after {min(report.cut_after_s):.1f}-"
        f"{max(report.cut_after_s):.1f} s, the trickling ones held",
        p99_ms=report.p99_ms(),
        cut_max_s=max(report.cut_after_s),
    )


@pytest.mark.alone
def test_a_body_shorter_than_its_content_length_reaches_nothing_and_is_counted(front, db, figures):
    server = front()
    body = samples.encode(samples.payment_events()[1])
    head = (
        f"POST /webhooks/stripe HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body) + 10}\r\n"
        f"Stripe-Signature: {signed_headers(body)['Stripe-Signature']}\r\n\r\n"
    ).encode()
    before = refusals(server)
    # The client sends all it has, 10 bytes short, and half-closes.
    answer = framing.exchange(address(server), head + body, half_close=True)

    assert answer.ended != "open" and answer.status() in (None, 400)
    assert counted_since(server, before, 1) == Counter({"400": 1})
    assert table_counts(db) == {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}
    figures.record(
        "validly signed body 10 bytes shorter than its Content-Length, client half-closes",
        "the front never hands it on: connection closed, counted as 400 bad_request; nothing written",
        f"connection {answer.ended} after {answer.ended_s * 1000:.0f} ms "
        f"({answer.status() or 'no answer'}); ledger, failures and fulfilments empty",
    )


@pytest.mark.alone
def test_stopping_serve_stops_the_front_and_gunicorn_without_waiting_for_slow_connections(front):
    server = front()
    processes = psutil.Process(server.proc.pid).children(recursive=True)
    gunicorn = next(p for p in processes if "gunicorn" in " ".join(p.cmdline()))
    front_dir = Path(gunicorn.environ()["WEBHOOK_FRONT_DIR"])
    slow = framing.Held(address(server), framing.HEAD + b"Content-Length: 100\r\n\r\n", 20)
    time.sleep(0.5)
    started = time.monotonic()
    server.stop()
    stopped_s = time.monotonic() - started
    slow.close()

    assert server.proc.returncode == 0
    # Not the read timeout (10 s): a request that has not arrived has nothing to finish.
    assert stopped_s < 6
    assert not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not front_dir.exists()


def test_serve_without_nginx_says_so_and_serves_loopback_only(database_url):
    server = Gunicorn(service_env(database_url, WEBHOOK_NGINX="no-such-nginx", HOST="0.0.0.0"), SERVE)
    try:
        listening = {
            c.laddr.ip
            for c in psutil.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == server.port
        }
        first_line = server.output().splitlines()[0]
    finally:
        server.stop()

    assert first_line == (
        "serve: nginx is not installed (apt-get install nginx), so gunicorn alone serves "
        f"127.0.0.1:{server.port} only, not 0.0.0.0:{server.port}"
    )
    assert listening == {"127.0.0.1"}


@pytest.mark.alone
def test_done_when_attacks_held_open_against_bin_serve_stall_no_delivery(front, figures):
    """Issue 23's "Done when", against ./bin/serve with its default settings."""
    server = front(command=[str(ROOT / "bin" / "serve")])
    window_s = sized(4, 8)  # within the default read timeout: every attack is held throughout
    held = {
        "negative-chunk requests": framing.Held(address(server), framing.NEGATIVE_CHUNK, 4),
        "over-cap chunk sizes": framing.Held(address(server), framing.OVER_CAP_CHUNK, 32),
        "endless heads": framing.Held(address(server), framing.ENDLESS_HEAD, 8),
        "unread pipelines": framing.Held(address(server), framing.READYZ * 20_000, 6),
    }
    deliveries, probes = [], []
    try:
        until = time.monotonic() + window_s
        while time.monotonic() < until:
            deliveries.append(deliver(server))
            probes.append(healthz(server))
            time.sleep(0.1)
    finally:
        for connections in held.values():
            connections.close()

    assert max(deliveries) < 2 and max(probes) < 1
    assert_quiet(server)
    figures.record(
        f"bin/serve with {', '.join(f'{len(h.conns)} {name}' for name, h in held.items())} held open "
        f"for {window_s} s",
        "signed deliveries answered 200 within 2 s and /healthz within 1 s meanwhile",
        f"{len(deliveries)} deliveries, slowest {max(deliveries) * 1000:.0f} ms; {len(probes)} /healthz, "
        f"slowest {max(probes) * 1000:.0f} ms",
        delivery_max_ms=max(deliveries) * 1000,
        healthz_max_ms=max(probes) * 1000,
    )
