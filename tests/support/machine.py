"""What a test needs of the machine: root, ip netns, PostgreSQL servers of its own, nginx, a browser, pg_dump.

Where it is missing the test is skipped, naming what to install, so a laptop
runs the rest; where the matching WEBHOOKS_REQUIRE_* is set, as .ci/run sets
every one, the same absence fails the test instead of hiding it. A test that
asks for anything but pg_dump must be marked `system`, the tests that
`pytest -m "not system"` leaves out: asking unmarked fails it, whatever the
machine has.
"""

from __future__ import annotations

import os
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
