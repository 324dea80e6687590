"""The outbox rows: workers draining a backlog into a receiver, and the wake-up latency.

`python -m webhooks worker` processes, with their default settings, deliver
to bench.receiver on loopback, which answers at once or after a delay. The
drain enqueues a backlog in one commit once the workers are idle and times
it from that commit to the last job's arrival; the wake-up commits one job
at a time, at random moments, and times each from its commit to its
arrival. The receiver's record says whether every job arrived, and how
many arrived more than once.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg
import requests
from psycopg.conninfo import make_conninfo

from webhooks.core import outbox

from . import cpu, receiver, servers

BACKLOG = 3_000
WARM_UP_JOBS = 100
KIND = "bench.effect"
# Commits of the wake-up row land this far apart at most, at random, so they
# fall anywhere in a worker's poll.
_MAX_GAP_S = 0.2
_ENQUEUE = """
SELECT count(*) FILTER (WHERE webhooks_enqueue(%(kind)s, jsonb_build_object('n', g), %(prefix)s || g))
FROM generate_series(1, %(count)s) AS g
"""


@dataclass
class Delivered:
    jobs: int
    # Distinct jobs the receiver had by the end, and the POSTs that carried them.
    arrived: int
    posts: int
    # Per job: its arrival less its commit.
    latencies_s: list[float]
    # From the first commit to the last arrival.
    seconds: float
    # CPU seconds over the window: the workers' processes, their PostgreSQL backends.
    cpu_s: dict[str, float]
    idle: float


class Outbox:
    """A receiver and `workers` outbox workers on `conninfo`, started, warmed up and idle."""

    def __init__(self, conninfo: str, url: str, procs: list[subprocess.Popen], name: str):
        self.conninfo, self.url, self.procs, self.name = conninfo, url, procs, name

    def drain(self, jobs: int, timeout_s: float = 120.0) -> Delivered:
        """`jobs` enqueued in one commit, delivered."""
        prefix = self._prefix()
        with self._meter() as meter, psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(_ENQUEUE, {"kind": KIND, "prefix": prefix, "count": jobs})
            committed = time.time()
            arrivals, posts = self._wait(prefix, jobs, timeout_s)
        commits = {f"{prefix}{n}": committed for n in range(1, jobs + 1)}
        return _delivered(commits, arrivals, posts, meter)

    def wake_ups(self, jobs: int, rng: random.Random, timeout_s: float = 30.0) -> Delivered:
        """`jobs` committed one at a time at random moments, each timed to its arrival."""
        prefix, commits = self._prefix(), {}
        with self._meter() as meter, psycopg.connect(self.conninfo, autocommit=True) as conn:
            for n in range(1, jobs + 1):
                time.sleep(rng.uniform(0, _MAX_GAP_S))
                outbox.enqueue(conn, KIND, {"n": n}, f"{prefix}{n}")
                commits[f"{prefix}{n}"] = time.time()
            arrivals, posts = self._wait(prefix, jobs, timeout_s)
        return _delivered(commits, arrivals, posts, meter)

    def _prefix(self) -> str:
        return f"{KIND}:{uuid.uuid4().hex[:8]}:"

    def _meter(self) -> cpu.Meter:
        return cpu.Meter([p.pid for p in self.procs], cpu.backends(self.conninfo, self.name))

    def _wait(self, prefix: str, jobs: int, timeout_s: float) -> tuple[dict[str, float], int]:
        deadline = time.monotonic() + timeout_s
        while True:
            seen = requests.get(f"{self.url}/received", params={"prefix": prefix}, timeout=10).json()
            if len(seen["arrivals"]) >= jobs or time.monotonic() > deadline:
                return seen["arrivals"], seen["posts"]
            time.sleep(0.05)


def _delivered(commits: dict[str, float], arrivals: dict[str, float], posts: int, meter) -> Delivered:
    latencies = sorted(arrivals[key] - commits[key] for key in commits if key in arrivals)
    seconds = (max(arrivals.values()) - min(commits.values())) if arrivals else float("nan")
    return Delivered(len(commits), len(arrivals), posts, latencies, seconds, meter.used, meter.idle)


@contextlib.contextmanager
def running(
    conninfo: str, workers: int, secret: str, workdir: Path, delay_ms: int = 0, answer_bytes: int = 0
):
    """An `Outbox` with `workers` default workers, warmed up, its receiver answering after `delay_ms`
    with a body of `answer_bytes`."""
    name = f"bench-outbox-{os.getpid()}"
    with servers.receiver(workdir / "receiver.log", delay_ms, answer_bytes) as (url, _pid, _front):
        env = {
            **os.environ,
            "DATABASE_URL": make_conninfo(conninfo, application_name=name),
            "STRIPE_WEBHOOK_SECRET": secret,
            "WEBHOOK_OUTBOX_URL": url + receiver.EFFECTS,
        }
        logs = [workdir / f"worker-{n}.log" for n in range(workers)]
        procs = [_worker(env, log) for log in logs]
        try:
            for proc, log in zip(procs, logs, strict=True):
                _wait_started(proc, log)
            handle = Outbox(conninfo, url, procs, name)
            warm = handle.drain(WARM_UP_JOBS * workers)
            if warm.arrived < warm.jobs:
                raise RuntimeError(f"outbox workers delivered {warm.arrived} of {warm.jobs} warm-up jobs")
            yield handle
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "webhooks", "worker"],
            cwd=servers.ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_started(proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while "outbox_worker_started" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"outbox worker did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)
