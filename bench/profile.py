"""Where the service's workers spent their samples, from py-spy's collapsed stacks.

Each sample is charged to the package of its innermost frame (psycopg,
gunicorn, flask, webhooks, ...). Samples in a wait for the database, a lock
or the next request are counted apart: under load they measure queueing,
not work.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from webhooks.traffic.report import markdown_table

_WAITS = ("Connection.wait", "Condition.wait", "Lock.acquire")
# Innermost when a thread waits for a request (the executor's queue.get is C
# code, so its caller is the last Python frame) or the event loop in epoll.
_IDLE = ("_worker", "EpollSelector.select")
_FILE = re.compile(r"\(([^:()]+):\d+\)$")


def _package(frame: str) -> str:
    function = frame.split(" (")[0]
    if function in _WAITS:
        return "waiting (database answer, pool)"
    if function in _IDLE:
        return "waiting for work (thread pool, event loop)"
    match = _FILE.search(frame)
    if not match:
        return "other"
    path = match.group(1)
    return path.split("/")[0] if "/" in path else path.removesuffix(".py")


def summary(stacks: Path, top: int = 10) -> str:
    samples: Counter = Counter()
    for line in stacks.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples[_package(stack.split(";")[-1])] += int(count)
    total = sum(samples.values())
    rows = [[package, f"{100 * n / total:.1f}%"] for package, n in samples.most_common(top)]
    return markdown_table(["innermost package (py-spy samples of the workers)", "share"], rows)
