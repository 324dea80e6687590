"""The front's refusals, counted without a file that grows for ever.

nginx writes one line per request the app did not answer, its status, to
its log in the front's folder (webhooks/web/front.py). `serve` runs a
`Tally` beside nginx: it reads the log on from where it stopped, and writes
the totals by status to a small file beside it, which every gunicorn worker
reads at a scrape (`counts`). Once the log passes ROTATE_AT_BYTES, the tally
renames it and has nginx reopen its log (USR1, as logrotate does); it waits
until no nginx process holds the old file any more, reads that to its end,
and removes it. Nothing is lost and nothing is counted twice, and the log
never holds much more than the bound.

Why not nginx's syslog output, read from a socket: over a Unix datagram
socket nginx drops every line the reader's queue cannot take at once
(`net.unix.max_dgram_qlen`, a few datagrams on many systems), without a
word, and a burst of refusals is when the count matters; over UDP any local
user could send counts of their own.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import structlog

from .front import refused_log

log = structlog.get_logger(__name__)

# The log is rotated once it is this long (each line is a status and a newline).
ROTATE_AT_BYTES = 64 * 1024
COUNTS = "refusals.json"
# How often the tally reads on: a scrape is at most this far behind the front.
_EVERY_S = 0.1
# How long nginx gets to reopen its log before the old one is read and removed regardless.
_REOPEN_S = 5.0


def counts_path(front_dir: str | Path) -> Path:
    return Path(front_dir) / COUNTS


def counts(front_dir: str | Path) -> dict[str, int]:
    """The refusals counted so far, by status (none before the tally's first write)."""
    try:
        return json.loads(counts_path(front_dir).read_text())
    except FileNotFoundError:
        return {}


class Tally:
    """Counts the front's log into `refusals.json`, rotating the log past its bound.

    `reopen` has nginx reopen its log; `holders` names nginx's processes.
    """

    def __init__(self, front_dir: Path, reopen: Callable[[], None], holders: Callable[[], list[int]]):
        self._log = refused_log(front_dir)
        self._old = self._log.with_name(self._log.name + ".old")
        self._counts = counts_path(front_dir)
        self._reopen, self._holders = reopen, holders
        self._totals: Counter[str] = Counter()
        self._written: Counter[str] | None = None
        self._offset = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(_EVERY_S):
            self.step()

    def step(self) -> None:
        """Count the lines written since the last step; rotate the log if it is past its bound."""
        self._count(self._log)
        if self._offset >= ROTATE_AT_BYTES:
            self._rotate()
        if self._totals != self._written:
            self._write()

    def _count(self, path: Path) -> None:
        try:
            with open(path, "rb") as logged:
                logged.seek(self._offset)
                data = logged.read()
        except FileNotFoundError:
            return  # nginx has not opened it yet
        # A line the front is still writing is counted next time.
        whole = data[: data.rfind(b"\n") + 1]
        self._totals.update(whole.decode("ascii", "replace").split())
        self._offset += len(whole)

    def _rotate(self) -> None:
        os.replace(self._log, self._old)
        self._reopen()
        deadline = time.monotonic() + _REOPEN_S
        while self._held() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._held():
            log.warning("front_log_not_reopened", log=str(self._log), waited_s=_REOPEN_S)
        self._count(self._old)
        self._old.unlink()
        self._offset = 0

    def _held(self) -> bool:
        """Whether an nginx process still has the old log open (and so may write to it)."""
        for pid in self._holders():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue  # gone
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == str(self._old):
                        return True
                except OSError:
                    pass  # closed meanwhile
        return False

    def _write(self) -> None:
        """The totals, replaced whole so that a scrape never reads half of them."""
        written = self._counts.with_name(self._counts.name + ".new")
        written.write_text(json.dumps(dict(sorted(self._totals.items()))))
        # Read by gunicorn's workers, which may run as another user.
        written.chmod(0o644)
        os.replace(written, self._counts)
        self._written = Counter(self._totals)


def with_children(pid: int) -> list[int]:
    """`pid` and its children: nginx's master and its workers."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(child) for child in children)]
