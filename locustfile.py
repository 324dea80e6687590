"""Locust load for the webhook endpoint.

The same events, signing and retries as `python -m webhooks loadtest`:

    STRIPE_WEBHOOK_SECRET=whsec_... DATABASE_URL=... \\
        locust -f locustfile.py --host http://127.0.0.1:8000 --headless -u 16 -r 16 -t 30s

Users share one stream of deliveries in which each event's LOADTEST_DUPLICATES
copies (default 4) come back to back, so several users send the same event at
once. A 409 or 5xx is recorded as a failure and retried with Stripe-like
backoff. With DATABASE_URL set, the ledger and fulfilments are audited when the
test stops, and a failed audit makes locust exit 1.
"""

import os
import time

import gevent
from locust import FastHttpUser, constant, events, task

from webhooks.infra.config import Settings
from webhooks.providers import Outgoing
from webhooks.providers.stripe import NAME
from webhooks.traffic import audit, checker, plugin, sender, signing
from webhooks.traffic import stripe as stripe_traffic

DUPLICATES = int(os.environ.get("LOADTEST_DUPLICATES", "4"))
SECRET = next(iter(Settings.from_env().webhook_secrets), None)
PATH = f"/webhooks/{NAME}"
RETRY = sender.Retry()
sent: dict[str, Outgoing] = {}  # events with at least one delivery answered 2xx, by id
answers: list[checker.Answer] = []  # every attempt's answer, for the history checker


def _deliveries():
    while True:
        yield from (
            delivery for delivery in plugin.marked(stripe_traffic.events(3)) for _ in range(DUPLICATES)
        )


_next_delivery = _deliveries()

# gevent's loop keeps the time it last looked at, from before this file's imports:
# on a loaded machine they take seconds, and --run-time, counted from that stale
# time, ended a run before its users sent anything.
gevent.get_hub().loop.update_now()


class StripeWebhooks(FastHttpUser):
    wait_time = constant(0)

    @task
    def deliver(self) -> None:
        body, outgoing = next(_next_delivery)
        for attempt in range(1, RETRY.budget + 1):
            headers = signing.headers(NAME, body, SECRET, outgoing)
            started = time.monotonic()
            with self.client.post(PATH, data=body, headers=headers, catch_response=True) as response:
                answers.append(
                    checker.Answer(
                        outgoing.event_id,
                        response.status_code or None,
                        started,
                        time.monotonic(),
                        response.headers.get("Idempotent-Replayed") == "true",
                        outgoing.account,
                    )
                )
                if not sender.retryable(response.status_code or None):
                    self._answered(outgoing, response)
                    return
                response.failure(f"{response.status_code}: retried like Stripe")
            gevent.sleep(RETRY.delay(attempt))

    @staticmethod
    def _answered(outgoing: Outgoing, response) -> None:
        if not 200 <= response.status_code < 300:
            response.failure(f"{response.status_code}: {response.text}")
            return
        sent.setdefault(outgoing.event_id, outgoing)


@events.quitting.add_listener
def _audit(environment, **_) -> None:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return
    # Only events that were answered: the stop can cut a delivery short.
    for check in audit.checks(url, stripe_traffic.TRAFFIC, list(sent.values()), answers):
        print(f"{'PASS' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
        if not check.passed:
            environment.process_exit_code = 1
