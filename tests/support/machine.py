"""What a test needs of the machine: root, ip netns, PostgreSQL servers of its own, nginx, a browser, pg_dump.

Where it is missing the test is skipped, naming what to install, so a laptop
runs the rest; where the matching WEBHOOKS_REQUIRE_* is set, as .ci/run sets
every one, the same absence fails the test instead of hiding it. A test that
asks for anything but pg_dump must be marked `system`, the tests that
`pytest -m "not system"` leaves out: asking unmarked fails it, whatever the
machine has.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

SYSTEM = {
    "WEBHOOKS_REQUIRE_BROWSER",
    "WEBHOOKS_REQUIRE_FRONT",
    "WEBHOOKS_REQUIRE_PG_SERVERS",
    "WEBHOOKS_REQUIRE_NETNS",
}
# The test being run (tests/conftest.py sets it), None outside pytest: bench runs the same helpers.
running: pytest.Item | None = None


def require(setting: str, missing: str | None) -> None:
    """Nothing where `missing` is None (the machine has it); else `lacking(setting, missing)`."""
    if setting in SYSTEM and running is not None and running.get_closest_marker("system") is None:
        pytest.fail(f"{running.nodeid} needs what {setting} names: mark it @pytest.mark.system")
    if missing is not None:
        lacking(setting, missing)


def lacking(setting: str, what: str) -> NoReturn:
    """Skip the calling test, naming what the machine lacks; fail it instead where `setting` is set."""
    if os.environ.get(setting):
        pytest.fail(what)
    pytest.skip(what)


# The folder where the xdist workers of one run take turns (tests/conftest.py makes it).
TURNS = "WEBHOOKS_TEST_TURNS"


@contextlib.contextmanager
def turn(alone: bool) -> Iterator[None]:
    """The machine shared with the tests the run's other workers are running, or, `alone`, to
    this test only, once those running end: a test that measures time, or that changes what
    the whole machine sees.

    A reader-writer lock: the room is shared, or held alone. Every test passes the
    door on its way in, and one waiting to be alone waits there holding it, so the tests
    that come after it wait too, and it is never starved.
    """
    folder = os.environ.get(TURNS)
    if not folder:
        yield
        return
    with open(Path(folder) / "door", "a") as door, open(Path(folder) / "room", "a") as room:
        fcntl.flock(door, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(door, fcntl.LOCK_UN)
        yield  # closing the room's file lets the next in
