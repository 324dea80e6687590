"""The suite's own connection budget (tests/support/connections.py): what lets `-n auto` run more
workers than a storm's pool each would allow, without a storm ever short of its connections."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from tests.support import connections

ROOT = Path(__file__).resolve().parent.parent


def test_a_fresh_server_holds_three_workers_a_core_and_a_busy_one_fewer_never_none():
    fresh = 100 - 3  # max_connections less superuser_reserved_connections
    assert connections.workers(fresh, cores=2) == 6
    assert connections.workers(fresh, cores=1) == 3
    assert connections.workers(60, cores=2) == 2
    assert connections.workers(10, cores=2) == 1


def _alone(monkeypatch, folder: Path, shared: int) -> None:
    """This process as a worker of a run of its own, sharing `shared` connections in `folder`."""
    monkeypatch.setattr(connections, "_folder", folder)
    monkeypatch.setattr(connections, "shared", shared)
    monkeypatch.setattr(connections, "_holding", 0)


def _other_worker(folder: Path, shared: int, count: int) -> subprocess.Popen:
    """Another worker of the run holding `count` connections until its stdin closes."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from tests.support import connections as c\n"
            f"c._folder, c.shared = Path({str(folder)!r}), {shared}\n"
            f"with c.held({count}):\n"
            "    print('held', flush=True); sys.stdin.read()",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_storm_waits_for_the_connections_another_worker_holds_and_takes_them_once_free(
    tmp_path, monkeypatch
):
    shared = 12
    _alone(monkeypatch, tmp_path, shared)
    holder = _other_worker(tmp_path, shared, connections.PER_WORKER + shared - 2)
    taken = threading.Event()

    def storm() -> None:
        with connections.held(connections.PER_WORKER + 5):
            taken.set()

    thread = threading.Thread(target=storm)
    try:
        thread.start()
        assert not taken.wait(0.5), "took 5 of the 2 connections left"
        holder.stdin.close()
        assert taken.wait(10), "still waiting after the other worker gave its connections back"
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
        thread.join(timeout=10)


def test_a_test_that_opens_no_more_than_its_worker_keeps_takes_nothing(tmp_path, monkeypatch):
    _alone(monkeypatch, tmp_path, 1)
    holder = _other_worker(tmp_path, 1, connections.PER_WORKER + 1)
    taken = threading.Event()

    def test() -> None:
        with connections.held(connections.PER_WORKER):
            taken.set()

    thread = threading.Thread(target=test, daemon=True)
    try:
        thread.start()
        assert taken.wait(5), "waited for the one shared connection another worker holds"
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
        thread.join(timeout=10)
