"""Turns on the machine under xdist (tests/support/machine.py): tests share it, and one marked
`alone` has it to itself, after the tests already running and before any that come after. bin/test
runs the `alone` tests in a pass of their own; these turns keep them alone in any other xdist run."""

from __future__ import annotations

import threading
import time

from tests.support import machine

# Long enough for a thread to reach its lock on a busy machine: it has nothing else to do.
SETTLE_S = 0.5


def test_a_test_alone_waits_for_those_running_and_those_after_it_wait_for_it(tmp_path, monkeypatch):
    monkeypatch.setenv(machine.TURNS, str(tmp_path))
    seen: list[str] = []
    first_in, first_may_end = threading.Event(), threading.Event()

    def shared(name: str, hold: threading.Event | None = None) -> None:
        with machine.turn(alone=False):
            seen.append(f"{name} in")
            if hold is not None:
                first_in.set()
                hold.wait(10)
            seen.append(f"{name} out")

    def alone() -> None:
        with machine.turn(alone=True):
            seen.append("alone in")
            time.sleep(SETTLE_S)
            seen.append("alone out")

    threads = [threading.Thread(target=shared, args=("first", first_may_end))]
    threads[0].start()
    assert first_in.wait(10)
    for target, args in ((alone, ()), (shared, ("later",))):
        threads.append(threading.Thread(target=target, args=args))
        threads[-1].start()
        time.sleep(SETTLE_S)
    # A shared test beside the first would be in by now; the one after the alone one waits too.
    assert seen == ["first in"]
    first_may_end.set()
    for thread in threads:
        thread.join(10)
    assert seen == ["first in", "first out", "alone in", "alone out", "later in", "later out"]


def test_shared_tests_run_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv(machine.TURNS, str(tmp_path))
    with machine.turn(alone=False):
        both_in = threading.Event()

        def second() -> None:
            with machine.turn(alone=False):
                both_in.set()

        thread = threading.Thread(target=second)
        thread.start()
        assert both_in.wait(10)
        thread.join(10)
