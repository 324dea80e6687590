"""The served stack (gunicorn.conf.py's defaults) against clients that do not send
their request: slow ones cannot stall deliveries, and a short body is refused."""
from __future__ import annotations

import os
import socket
import statistics
import time

from bench import slow_clients
from tests.conftest import SECRET, signed_headers, table_counts
from tests.reliability import sized
from webhooks.ops import samples
from webhooks.service.framing import Framing


_MISLEADING = ("WORKER TIMEOUT", "SIGKILL", "[ERROR]", "Traceback", "Too many open files")


def _deliveries_through_slow_clients(server, seconds, trickle, silent):
    """Slow clients against `server` while deliveries are sent: every delivery
    answered 200 with p99 <= 1 s, nothing misleading logged. (report, log)"""
    report = slow_clients.run(server.url, SECRET, seconds, trickle, silent)
    log = server.output()
    assert set(report.statuses) == {"200"}
    assert report.p99_ms() <= 1000
    for misleading in _MISLEADING:
        assert misleading not in log
    return report, log


def test_slow_clients_are_cut_and_never_stall_deliveries(gunicorn, db, figures):
    trickle, silent = 200, 200
    seconds, read_timeout_s = sized((20, 3), (60, 10))
    server = gunicorn(
        WEB_CONCURRENCY=os.cpu_count(), WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS=read_timeout_s
    )
    report, _log = _deliveries_through_slow_clients(server, seconds, trickle, silent)

    assert report.cut_after_s and max(report.cut_after_s) <= read_timeout_s + 1.5
    assert set(report.cut_by) == {"HTTP/1.1 408 Request Timeout"}
    figures.record(
        f"{trickle} connections trickling one body byte per second and {silent} sending "
        f"headers and no body, each re-opened when cut, for {seconds} s "
        f"(read timeout {read_timeout_s} s)",
        "valid deliveries sent meanwhile answered 200 with p99 <= 1 s; every slow connection "
        "answered 408 and closed within the read timeout; no worker killed, no error logged",
        f"{len(report.latencies_ms)} deliveries, p99 {report.p99_ms():.0f} ms, max "
        f"{max(report.latencies_ms):.0f} ms; {report.opened} slow connections opened, "
        f"{len(report.cut_after_s)} cut with 408 after {min(report.cut_after_s):.1f}-"
        f"{max(report.cut_after_s):.1f} s",
        p99_ms=report.p99_ms(),
        cut_max_s=max(report.cut_after_s),
    )


def test_more_slow_connections_than_a_worker_holds_do_not_stall_deliveries(gunicorn, db, figures):
    # 300 slow connections against two workers of 50 connections each: at
    # the cap the longest-reading one is cut so the door stays open.
    per_worker, trickle, silent, read_timeout_s = 50, 150, 150, 10
    seconds = sized(8, 30)
    server = gunicorn(
        WEB_CONCURRENCY=2, WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS=read_timeout_s,
        GUNICORN_WORKER_CONNECTIONS=per_worker,
    )
    # Waiting for a slot would cost a delivery the read timeout (p99 <= 1 s below).
    report, _log = _deliveries_through_slow_clients(server, seconds, trickle, silent)

    assert set(report.cut_by) == {"HTTP/1.1 408 Request Timeout"}
    figures.record(
        f"{trickle} trickling and {silent} silent connections, each re-opened when cut, "
        f"against 2 workers holding {per_worker} connections each, for {seconds} s",
        "valid deliveries sent meanwhile answered 200 with p99 <= 1 s: at the cap the "
        "longest-reading connection is cut (408), not the door closed",
        f"{len(report.latencies_ms)} deliveries, p99 {report.p99_ms():.0f} ms; "
        f"{report.opened} slow connections opened, {len(report.cut_after_s)} cut with 408, "
        f"median after {statistics.median(report.cut_after_s):.1f} s",
        p99_ms=report.p99_ms(),
    )


def test_an_open_file_limit_below_the_connection_cap_lowers_the_cap_not_the_workers(gunicorn, db, figures):
    # 256 descriptors per worker, soft and hard, against 600 slow connections:
    # without fitting the cap a worker dies of EMFILE at its ~250th socket.
    open_files, trickle, silent = 256, 300, 300
    seconds = sized(8, 30)
    server = gunicorn(open_files=open_files, WEB_CONCURRENCY=2)
    report, log = _deliveries_through_slow_clients(server, seconds, trickle, silent)

    assert log.count("Booting worker") == 2, "a worker died and was replaced"
    # 256 less the pool's 8 connections and 64 other descriptors.
    assert log.count("worker_connections lowered to 184: the open-file limit is 256") == 2
    figures.record(
        f"open-file limit {open_files} (soft and hard) per worker, 2 workers, {trickle} "
        f"trickling and {silent} silent connections re-opened when cut, for {seconds} s",
        "each worker lowers its connection cap to fit the limit and says so once; no worker "
        "dies; valid deliveries answered 200 with p99 <= 1 s",
        f"{len(report.latencies_ms)} deliveries, p99 {report.p99_ms():.0f} ms; "
        f"{report.opened} slow connections opened; 2 workers booted, none replaced",
        p99_ms=report.p99_ms(),
    )


def test_body_shorter_than_its_content_length_is_400_and_writes_nothing(gunicorn, db, figures):
    server = gunicorn()
    body = samples.encode(samples.payment_events()[1])
    headers = signed_headers(body)
    request = (
        f"POST /webhooks/stripe HTTP/1.1\r\nHost: test\r\nContent-Length: {len(body) + 10}\r\n"
        f"Stripe-Signature: {headers['Stripe-Signature']}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)  # sent everything it had: 10 bytes short
        # The server answers and closes: the request was cut short.
        answer = b"".join(iter(lambda: conn.recv(4096), b""))

    status_line = answer.split(b"\r\n")[0].decode()
    assert status_line.startswith("HTTP/1.1 400")
    assert b'"body_incomplete"' in answer
    assert table_counts(db) == {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}
    figures.record(
        "validly signed body 10 bytes shorter than its Content-Length, client half-closes",
        "400 body_incomplete; nothing written",
        f"answer {status_line}; ledger, failures and fulfilments empty",
    )


def test_framing_waits_for_the_whole_body_whatever_its_encoding():
    head = b"POST / HTTP/1.1\r\nHost: x\r\n"
    assert not Framing(head, 100).complete
    assert Framing(head + b"\r\n", 100).complete
    sized_request = head + b"Content-Length: 5\r\n\r\n"
    assert not Framing(sized_request + b"abcd", 100).complete
    assert Framing(sized_request + b"abcde", 100).complete
    chunked = head + b"Transfer-Encoding: chunked\r\n\r\n"
    assert not Framing(chunked + b"5\r\nab", 100).complete
    assert not Framing(chunked + b"5\r\nabcde\r\n", 100).complete
    assert not Framing(chunked + b"5\r\nabcde\r\n0\r\n", 100).complete
    assert Framing(chunked + b"5\r\nabcde\r\n0\r\n\r\n", 100).complete
    # Over the body cap: handed over at once for the app's 413, then closed.
    too_big = Framing(head + b"Content-Length: 101\r\n\r\n", 100)
    assert too_big.complete and too_big.close_after
    assert Framing(chunked + b"65\r\n" + b"a" * 50, 100).close_after
    assert Framing(head + b"Expect: 100-continue\r\nContent-Length: 5\r\n\r\n", 100).expects_continue


def test_stopping_the_server_does_not_wait_for_slow_connections(gunicorn):
    server = gunicorn(WEB_CONCURRENCY=2)
    slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
    for conn in slow:
        conn.sendall(b"POST /webhooks/stripe HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n")
    time.sleep(1.0)  # every one accepted and waiting for its body
    started = time.monotonic()
    server.stop()
    stopped_s = time.monotonic() - started
    for conn in slow:
        conn.close()

    # Not the read timeout (10 s): a request that has not arrived has nothing to finish.
    assert stopped_s < 3.0
