"""The benchmark's peer, the seed article's Node handler, does what the article says."""

from __future__ import annotations

import concurrent.futures
import threading

import psycopg
import requests

from bench import servers, wrk
from tests.conftest import SECRET, signed_headers
from webhooks.traffic import samples


def test_seed_handler_fulfils_each_payment_once_and_replays_duplicates(server_url, tmp_path):
    with servers.private_schema(server_url, migrated=False) as conninfo:
        servers.seed_schema(conninfo)
        env = {"DATABASE_URL": servers.libpq_url(conninfo), "STRIPE_WEBHOOK_SECRET": SECRET}
        with servers.seed(env, tmp_path / "seed.log") as (url, _pid, _front):
            checkout, intent, charge = samples.payment_events()
            barrier = threading.Barrier(8)

            def post(evt, sign=True):
                body = samples.encode(evt)
                headers = signed_headers(body) if sign else {"Content-Type": "application/json"}
                barrier.wait() if sign and evt is checkout else None
                return requests.post(url + "/webhooks/stripe", data=body, headers=headers, timeout=10)

            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                racing = list(pool.map(post, [checkout] * 8))
            later = [post(intent), post(charge), post(checkout, sign=False)]
        with psycopg.connect(conninfo) as db:
            fulfilments = db.execute("SELECT payment_id FROM fulfilments").fetchall()

    assert [r.status_code for r in racing] == [200] * 8
    assert sum(r.headers.get("Idempotent-Replayed") != "true" for r in racing) == 1
    assert [r.json()["outcome"] for r in later[:2]] == ["already_fulfilled", "ignored"]
    assert later[2].status_code == 400
    assert fulfilments == [(samples.payment_id(checkout),)]


def test_wrk_requests_hold_each_event_signed_k_times_in_a_row(tmp_path):
    events = samples.payment_events()
    path = tmp_path / "requests"
    wrk.write_requests(path, "http://127.0.0.1:1", SECRET, events, duplicates=4)
    data, requests_ = path.read_bytes(), []
    while data:
        length, _, data = data.partition(b"\n")
        requests_.append(data[: int(length)])
        data = data[int(length) :]
    assert len(requests_) == 12 and len(set(requests_)) == 3
    assert requests_[:4] == [requests_[0]] * 4
    head, _, body = requests_[0].partition(b"\r\n\r\n")
    assert body == samples.encode(events[0])
    assert f"Content-Length: {len(body)}".encode() in head and b"Stripe-Signature: t=" in head
