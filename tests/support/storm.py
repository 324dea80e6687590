"""Released-together concurrent deliveries, each sender with its own connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from tests.support import connections
from webhooks.traffic import checker
from webhooks.traffic.report import percentile

# The pools of the apps this test made (make_app, tests/conftest.py). A storm opens a connection
# per sender before it releases them: a pool left to grow on demand opens them a few at a time,
# and on a loaded machine a sender waiting longer than the pool's wait is answered 503.
apps_pools: list[ConnectionPool] = []


def _open_for(senders: int) -> None:
    for pool in apps_pools:
        pool.resize(min_size=max(pool.min_size, min(senders, pool.max_size)), max_size=pool.max_size)
        pool.wait(timeout=60)


@dataclass
class Result:
    status: int
    seconds: float
    replayed: bool
    started: float  # time.monotonic()

    def answer(self, event_id: str) -> checker.Answer:
        """This answer in the history checker's terms, for the event it delivered."""
        return checker.Answer(event_id, self.status, self.started, self.started + self.seconds, self.replayed)


def release_together(senders: list[Callable[[], object]], connections_each: int = 1) -> list[Result]:
    """Run each sender on its own thread, all released by one barrier: in this process, each on a
    connection of its own, held by the app's pool to the test's end; `connections_each=0` where
    they reach a server that holds its own."""
    connections.for_this_test(len(senders) * connections_each)
    if connections_each:
        _open_for(len(senders))
    barrier = threading.Barrier(len(senders))
    results: list[Result | BaseException] = [None] * len(senders)

    def run(i: int, send: Callable[[], object]) -> None:
        barrier.wait()
        started = time.monotonic()
        try:
            response = send()
            results[i] = Result(
                response.status_code,
                time.monotonic() - started,
                response.headers.get("Idempotent-Replayed") == "true",
                started,
            )
        except BaseException as exc:  # surfaced by the caller's assertion
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return results


def summary(results: list[Result]) -> str:
    by_status: dict[int, int] = {}
    for r in results:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    parts = [f"statuses={dict(sorted(by_status.items()))}", f"replayed={sum(r.replayed for r in results)}"]
    for label, group in (
        ("409", [r for r in results if r.status == 409]),
        ("replay", [r for r in results if r.replayed]),
    ):
        ms = [r.seconds * 1000 for r in group]
        if ms:
            parts.append(f"{label}_ms_p50={percentile(ms, 50):.1f} {label}_ms_p99={percentile(ms, 99):.1f}")
    return " ".join(parts)
