"""The PostgreSQL connections a run's xdist workers share.

A server allows `max_connections` (100 on a fresh PostgreSQL, as on CI).
Every worker keeps `PER_WORKER` of them for what any test holds at once: its
database's holder, the fixtures' own, a pool's first connections, a few
threads. What a test opens beyond that all at once - a storm's senders, each
on a connection of its own, or a gunicorn's workers, one per thread - it takes
from the run's shared rest first (`for_this_test`, `held`), waiting while
other workers hold it. So a run may have more workers than a storm's pool
each would allow, and storms still race on connections of their own, all
open together.

The shared rest is a folder of lock files, one per connection, and the
kernel drops a killed worker's locks. A taker that holds none waits for all
it needs, one such taker at a time (the folder's turnstile), so two never each
hold part of what the other waits for; one that already holds some (a test's
own server beside its module's) takes what is free without waiting, since
the others may be waiting for what it holds. Outside xdist (the serial pass, a plain `pytest`) a test has
the server to itself and takes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

# Connections each worker keeps for its tests' ordinary needs.
PER_WORKER = 10
# The most a test takes at once: a storm of 32 senders, a 4-worker gunicorn's 8 threads each.
LARGEST = 32
# What `-n auto` leaves for the server's other clients (a psql, a monitor).
SPARE = 3
WORKERS_PER_CORE = 3

# Set by tests/conftest.py in an xdist worker: the run's shared connections.
shared: int = 0
_folder: Path | None = None
_for_test: list[int] = []
_holding = 0  # connections this worker has taken


def workers(free: int, cores: int) -> int:
    """How many workers `free` connections hold, with room left for the largest taker: the tests
    wait on PostgreSQL, processes and polls more than they compute, so several per core."""
    return max(1, min(cores * WORKERS_PER_CORE, (free - SPARE - LARGEST) // PER_WORKER))


def configure(folder: Path, free: int, worker_count: int) -> None:
    """In a worker: what the run leaves to share once its `worker_count` workers keep their own, as
    locks in `folder` (the run's)."""
    global shared, _folder
    shared = max(0, free - SPARE - worker_count * PER_WORKER)
    _folder = folder


def _lock(path: Path, blocking: bool) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _take(count: int) -> list[int]:
    if _folder is None or count <= PER_WORKER:
        return []
    if _holding:
        # Beside what it holds already, over its own: without waiting, as the others may be
        # waiting for what it holds.
        return _gather(count)
    needed = min(count - PER_WORKER, shared)  # all there is: the one worker of a small server
    with _turnstile():
        held = _gather(needed)
        while len(held) < needed:
            time.sleep(0.02)
            held += _gather(needed - len(held))
    return held


@contextlib.contextmanager
def _turnstile() -> Iterator[None]:
    """One waiting taker at a time, so two never each hold part of what the other waits for."""
    fd = _lock(_folder / "turnstile", blocking=True)
    try:
        yield
    finally:
        os.close(fd)


def _gather(count: int) -> list[int]:
    """Up to `count` of the connections no worker holds now."""
    held: list[int] = []
    for slot in range(shared):
        if len(held) == count:
            break
        fd = _lock(_folder / f"{slot}", blocking=False)
        if fd is not None:
            held.append(fd)
    _count(len(held))
    return held


def _count(change: int) -> None:
    global _holding
    _holding += change


def _give_back(held: list[int]) -> None:
    for fd in held:
        os.close(fd)
    _count(-len(held))
    held.clear()


@contextlib.contextmanager
def held(count: int) -> Iterator[None]:
    """`count` connections open at once while in the block (a server's life)."""
    taken = _take(count)
    try:
        yield
    finally:
        _give_back(taken)


def for_this_test(count: int) -> None:
    """`count` connections open at once from now until the test's teardown ends: a pool keeps
    what a storm opened until its fixture closes it."""
    _for_test.extend(_take(count))


def test_ended() -> None:
    """After a test's teardown: what it took goes back."""
    _give_back(_for_test)
