"""What the tests of the served stack send and time: signed deliveries, /healthz, the front's refusals."""

from __future__ import annotations

import contextlib
import time
from collections import Counter

import requests

from bench import framing
from tests.conftest import SERVE, Gunicorn, migrated_schema, require_front, service_env, signed_headers
from tests.web.test_metrics import scrape
from webhooks.traffic import samples

_MISLEADING = ("Traceback", '"exception"', "WORKER TIMEOUT", "SIGKILL", "front_error")


@contextlib.contextmanager
def served(server_url: str, probe=None, **env):
    """`python -m webhooks serve` on a migrated schema of its own, `env` over the tests' settings;
    `probe` as for Gunicorn."""
    require_front()
    with migrated_schema(server_url) as url:
        server = Gunicorn(service_env(url, **env), SERVE, **({"probe": probe} if probe else {}))
        try:
            yield server
        finally:
            server.stop()


def address(server) -> tuple[str, int]:
    return "127.0.0.1", server.port


def signed_delivery() -> tuple[str, bytes, dict]:
    """A new payment's event: (its id, its body, its signed headers)."""
    evt = samples.payment_events()[1]
    body = samples.encode(evt)
    return evt["id"], body, signed_headers(body)


def deliver(server) -> float:
    """Seconds a new signed delivery took to be answered 200 for its own event."""
    event_id, body, headers = signed_delivery()
    started = time.monotonic()
    answer = requests.post(server.url + "/webhooks/stripe", data=body, headers=headers, timeout=10)
    assert answer.status_code == 200 and answer.json()["event_id"] == event_id, answer.text
    return time.monotonic() - started


def healthz(server) -> float:
    started = time.monotonic()
    assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
    return time.monotonic() - started


def served_meanwhile(server, rounds: int = 5) -> tuple[float, float]:
    """The slowest of `rounds` signed deliveries and of as many /healthz: (delivery s, healthz s)."""
    return max(deliver(server) for _ in range(rounds)), max(healthz(server) for _ in range(rounds))


def refusals(server) -> Counter:
    page = scrape(requests.get(server.metrics_url, timeout=10).text)
    return Counter(
        {
            dict(labels)["status"]: count
            for (name, labels), count in page.items()
            if name == "webhook_front_refusals_total"
        }
    )


def counted_since(server, before: Counter, total: int, within_s: float = 5.0) -> Counter:
    """The refusals counted since `before`, once they add up to `total` (or `within_s` has passed).

    `serve` tallies the front's log a few times a second, so a scrape may lag
    the front by that much; a little longer is waited, so that one counted
    twice would show.
    """
    deadline = time.monotonic() + within_s
    while sum((refusals(server) - before).values()) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    return refusals(server) - before


def until_cut(held: framing.Held, within_s: float) -> float:
    """Seconds until the front had closed or reset every held connection."""
    started = time.monotonic()
    while "open" in held.poll():
        assert time.monotonic() - started < within_s, Counter(held.poll())
        time.sleep(0.1)
    return time.monotonic() - started


def assert_quiet(server) -> None:
    """Nothing in the served stack's log that would send an operator looking for a bug."""
    log = server.output()
    for misleading in _MISLEADING:
        assert misleading not in log
