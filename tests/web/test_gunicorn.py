"""The same guarantees through real gunicorn workers over loopback HTTP."""

import http.client
import json

import pytest
import requests

from tests.conftest import OTHER_SECRET, SECRET, scripted_event, signed_headers, table_counts
from tests.support.rows import count_rows
from tests.support.storm import release_together, summary
from webhooks.traffic import samples


def _sender(url: str, body: bytes):
    session = requests.Session()  # its own HTTP connection per sender

    def send():
        headers = signed_headers(body)
        return session.post(url + "/webhooks/stripe", data=body, headers=headers, timeout=30)

    return send


def _storm(server, db, evt, senders, capsys, label):
    body = samples.encode(evt)
    # The server's workers hold the connections (module_gunicorn took them for its life).
    results = release_together([_sender(server.url, body) for _ in range(senders)], connections_each=0)
    with capsys.disabled():
        print(f"\n[gunicorn storm] {label} senders={senders} {summary(results)}")
    assert {r.status for r in results} <= {200, 409}, [r.status for r in results]
    assert sum(r.status == 200 and not r.replayed for r in results) <= 1
    # The module's server and database serve every storm: this event's rows alone.
    assert count_rows(db, "fulfilments", "event_id = %s", [evt["id"]]) == 1
    return results


@pytest.fixture
def server(gunicorn):
    return gunicorn()


@pytest.mark.parametrize("senders", [8, 32])
@pytest.mark.parametrize("trial", range(3))
def test_duplicate_storm_through_gunicorn_fulfils_once(module_gunicorn, module_db, senders, trial, capsys):
    evt = samples.payment_events()[1]
    _storm(module_gunicorn, module_db, evt, senders, capsys, f"paid-event trial={trial}")


@pytest.mark.parametrize("senders", [8, 32])
def test_duplicate_storm_on_a_slow_handler_answers_409_fast(module_gunicorn, module_db, senders, capsys):
    evt = scripted_event(sleep_s=1.5, payment_id=f"pi_slow_storm_{senders}")
    results = _storm(module_gunicorn, module_db, evt, senders, capsys, "slow-handler(1.5s)")
    conflicts = [r for r in results if r.status == 409]
    assert conflicts
    # Bounded by the 1 s lock timeout, never by the winner's 1.5 s handler
    # (a 409 can also queue behind other losers on the 4 busy workers).
    assert max(r.seconds for r in conflicts) < 1.5 * (senders / 4)


def test_chunked_body_over_the_limit_is_refused_not_truncated(gunicorn, db):
    server = gunicorn(WEBHOOK_MAX_BODY_BYTES=1000)
    evt = samples.payment_events()[1]
    evt["data"]["object"]["metadata"] = {"padding": "x" * 4000}
    body = samples.encode(evt)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.putrequest("POST", "/webhooks/stripe")
    for name, value in {**signed_headers(body), "Transfer-Encoding": "chunked"}.items():
        conn.putheader(name, value)
    conn.endheaders()
    for start in range(0, len(body), 512):
        chunk = body[start : start + 512]
        conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    conn.send(b"0\r\n\r\n")
    assert conn.getresponse().status == 413
    assert table_counts(db) == {"webhook_events": 0, "webhook_failures": 0, "fulfilments": 0}


def test_logs_are_json_lines_with_one_per_delivery_and_no_secrets(server, db):
    evt = samples.payment_events()[1]
    body = samples.encode(evt)
    headers = signed_headers(body)
    for _ in range(2):
        requests.post(server.url + "/webhooks/stripe", data=body, headers=headers, timeout=10)
    requests.post(server.url + "/webhooks/stripe", data=body, headers={}, timeout=10)
    failing = samples.encode(scripted_event(abort=True))
    requests.post(server.url + "/webhooks/stripe", data=failing, headers=signed_headers(failing), timeout=10)
    server.stop()
    output = server.output()
    for secret in ("whsec_", SECRET, OTHER_SECRET, headers["Stripe-Signature"]):
        assert secret not in output
    # Every line, gunicorn's own start, boot and shutdown lines included.
    lines = [json.loads(line) for line in output.splitlines()]
    assert any(line.get("logger") == "gunicorn.error" for line in lines)
    # No access-log line per request: the delivery line is the one line (and
    # gunicorn builds no access line at all unless logging is configured).
    assert not any(line.get("logger") == "gunicorn.access" for line in lines)
    deliveries = [line for line in lines if line.get("event") == "delivery"]
    assert [(d["status"], d["outcome"]) for d in deliveries] == [
        (200, "fulfilled"),
        (200, "replayed"),
        (400, "rejected"),
        (500, "failed"),
    ]
    assert deliveries[2]["error"] == "invalid_signature"
    assert all(d["duration_ms"] >= 0 and "event_type" in d for d in deliveries)
