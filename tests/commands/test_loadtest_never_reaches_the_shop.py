"""A loadtest beside a worker whose receiver is the shop's real one sends the shop none of its jobs."""

import subprocess
import sys

import requests

from tests import conftest
from tests.support.downstream import Downstream, Worker, wait_until
from tests.support.rows import count_rows
from webhooks.traffic import samples

EVENTS = 30


def test_a_worker_beside_a_loadtest_delivers_none_of_its_jobs_but_a_real_events(gunicorn, database_url, db):
    receiver = Downstream()
    worker = Worker(conftest.service_env(database_url, WEBHOOK_OUTBOX_URL=receiver.url))
    try:
        worker.wait_started()
        server = gunicorn()
        ran = subprocess.run(
            [sys.executable, "-m", "webhooks", "loadtest", "-n", str(EVENTS), "-k", "2"]
            + ["--url", server.url + "/webhooks/stripe"],
            cwd=conftest.ROOT,
            env={**conftest.service_env(database_url), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stdout + ran.stderr
        jobs = count_rows(db, "fulfilments")
        assert jobs == EVENTS // 3  # the load test's payments were fulfilled, and their jobs enqueued
        wait_until(
            lambda: worker.output().count('"event":"outbox_test_traffic_not_sent"') >= jobs,
            60,
            "the worker to take every load-test job",
        )
        # A real payment after it: the same worker still ships it.
        body = samples.encode(samples.payment_events()[1])
        answer = requests.post(
            server.url + "/webhooks/stripe", data=body, headers=conftest.signed_headers(body), timeout=30
        )
        assert answer.status_code == 200
        wait_until(lambda: receiver.received, 60, "the real payment's job at the receiver")
        wait_until(lambda: not count_rows(db, "pgqueuer"), 60, "an empty queue")
        assert len(receiver.received) == 1
    finally:
        worker.stop()
        receiver.close()
