"""`GET /metrics`: counts through the app, summed over gunicorn's worker processes.

Served on the scraper's listener only.
"""

import os
import signal
import threading
import time
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from tests.conftest import post_event, scripted_event, signed_headers
from tests.support.downstream import wait_until
from tests.support.senders import STANDARD
from webhooks.traffic import samples


def scrape(text: str) -> dict[tuple, float]:
    """{(sample name, sorted label items): value} from a Prometheus text page."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def get_metrics(client):
    """GET /metrics as the scraper's listener serves it (the public one has no /metrics)."""
    return Client(client.application.extensions["webhooks.metrics"].wsgi).get("/metrics")


def value(samples_: dict, name: str, **labels) -> float:
    """The sum over the samples of `name` whose labels include `labels` (others unnamed: any)."""
    wanted = set(labels.items())
    return sum(v for (sample, items), v in samples_.items() if sample == name and wanted <= set(items))


def test_deliveries_are_counted_by_outcome_status_and_conflict(client):
    checkout, intent, _ = samples.payment_events()
    post_event(client, intent)  # fulfilled
    post_event(client, intent)  # replayed
    post_event(client, checkout)  # same payment: already fulfilled
    client.post("/webhooks/stripe", data=b"{}", headers={"Stripe-Signature": "t=1,v1=00"})

    response = get_metrics(client)
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    got = scrape(response.get_data(as_text=True))
    assert value(got, "webhook_deliveries_total", outcome="fulfilled", status="200") == 1
    assert value(got, "webhook_deliveries_total", outcome="replayed", status="200") == 1
    assert value(got, "webhook_deliveries_total", outcome="already_fulfilled", status="200") == 1
    assert value(got, "webhook_deliveries_total", outcome="rejected", status="400") == 1
    assert value(got, "webhook_claim_conflicts_total", kind="event_completed") == 1
    assert value(got, "webhook_claim_conflicts_total", kind="payment_fulfilled") == 1
    assert value(got, "webhook_delivery_duration_seconds_count") == 4
    assert value(got, "webhook_delivery_duration_seconds_bucket", le="+Inf") == 4
    # The fulfilment's outbox job, read from the database at scrape time.
    assert value(got, "webhook_outbox_jobs", status="queued") == 1
    assert value(got, "webhook_outbox_jobs", status="failed") == 0
    assert value(got, "webhook_outbox_oldest_age_seconds", status="queued") >= 0
    assert value(got, "webhook_db_pool_pool_size") >= 1
    assert value(got, "webhook_db_pool_requests_num_total") >= 3


def test_a_duplicate_of_an_event_in_flight_counts_as_a_conflict(client):
    slow = scripted_event(sleep_s=1.5)
    first = threading.Thread(target=post_event, args=(client, slow))
    first.start()
    time.sleep(0.3)
    assert post_event(client, slow).status_code == 409
    first.join()
    got = scrape(get_metrics(client).get_data(as_text=True))
    assert value(got, "webhook_claim_conflicts_total", kind="event_in_flight") == 1
    assert value(got, "webhook_deliveries_total", outcome="in_progress", status="409") == 1


def test_the_outbox_age_grows_while_a_job_waits(client, db):
    post_event(client, samples.payment_events()[1])
    db.execute("UPDATE pgqueuer SET created = now() - interval '90 seconds'")
    got = scrape(get_metrics(client).get_data(as_text=True))
    assert value(got, "webhook_outbox_oldest_age_seconds", status="queued") >= 90


def _worker_pids(master_pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()}


def test_every_gunicorn_worker_is_counted_whichever_answers_the_scrape(gunicorn, workers_tmp):
    server = gunicorn(WEB_CONCURRENCY=4, PROMETHEUS_MULTIPROC_DIR=str(workers_tmp))
    deliveries = 16
    for evt in (samples.payment_events()[1] for _ in range(deliveries)):
        body = samples.encode(evt)
        # A new connection each: the deliveries spread over the workers.
        assert (
            requests.post(
                server.url + "/webhooks/stripe", data=body, headers=signed_headers(body), timeout=30
            ).status_code
            == 200
        )
    writers = {path.name.rsplit("_", 1)[-1] for path in workers_tmp.glob("counter_*.db")}
    assert len(writers) > 1, "all deliveries went to one worker: nothing to sum"

    def fulfilled() -> float:
        page = requests.get(server.metrics_url, timeout=10).text
        return value(scrape(page), "webhook_deliveries_total", outcome="fulfilled", status="200")

    # Every worker's pool figures, not only those of the worker answering the
    # scrape: each writes its own every second from a thread, not on every
    # delivery. One scrape: the worker answering it took fewer than all the
    # deliveries (above), and each scrape takes a connection of its own.
    time.sleep(2.5)
    page = requests.get(server.metrics_url, timeout=10).text
    assert value(scrape(page), "webhook_db_pool_requests_num_total") >= deliveries

    assert [fulfilled() for _ in range(8)] == [deliveries] * 8

    # A worker that dies keeps its counts; its live gauges go (child_exit).
    victim = next(
        pid
        for pid in sorted(_worker_pids(server.proc.pid))
        if (workers_tmp / f"gauge_livesum_{pid}.db").exists()
    )
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: not (workers_tmp / f"gauge_livesum_{victim}.db").exists(),
        30,
        "gunicorn's child_exit to mark the worker dead",
    )
    wait_until(lambda: len(_worker_pids(server.proc.pid)) == 4, 30, "a replacement worker")
    assert fulfilled() == deliveries


def test_deliveries_are_counted_per_provider(client):
    body, outgoing = STANDARD.event("invoice.paid")
    STANDARD.post(client, body, outgoing)
    STANDARD.post(client, body, outgoing)
    post_event(client, samples.payment_events()[1])
    got = scrape(get_metrics(client).get_data(as_text=True))
    assert value(got, "webhook_deliveries_total", provider="standard", outcome="ignored", status="200") == 1
    assert value(got, "webhook_deliveries_total", provider="standard", outcome="replayed", status="200") == 1
    assert value(got, "webhook_deliveries_total", provider="stripe", outcome="fulfilled", status="200") == 1
    assert value(got, "webhook_deliveries_total", provider="standard") == 2


def test_metrics_are_served_on_the_scrapers_listener_and_not_the_public_one(gunicorn):
    server = gunicorn(WEB_CONCURRENCY=1)
    public = requests.get(server.url + "/metrics", timeout=10)
    scraped = requests.get(server.metrics_url, timeout=10)
    other = requests.get(server.metrics_url.replace("/metrics", "/healthz"), timeout=10)
    assert public.status_code == 404 and "webhook_" not in public.text
    assert scraped.status_code == 200 and "webhook_outbox_jobs" in scraped.text
    # Prometheus's own content type, its charset said once.
    assert scraped.headers["Content-Type"].count("charset=") == 1
    # The scraper's listener serves nothing else.
    assert other.status_code == 404
