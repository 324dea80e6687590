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

Started as root, the tally is root, so it trusts nothing it reads or
writes by name: the front's folder is root's (no other user may add, link
or replace a file in it), the tally holds that folder and the log open by
descriptor, opens no name through a link, makes its counts file new each
time (O_EXCL), and counts only the statuses the front refuses with, so the
log's other words, whoever wrote them, go nowhere. nginx has no counter by
status of its own (stub_status counts connections), and the rotation needs
root's signal to nginx's root master, so the tally stays with `serve`.

Why not nginx's syslog output, read from a socket: over a Unix datagram
socket nginx drops every line the reader's queue cannot take at once
(`net.unix.max_dgram_qlen`, a few datagrams on many systems), without a
word, and a burst of refusals is when the count matters; over UDP any local
user could send counts of their own.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import structlog

from .front import REFUSALS, REFUSED_LOG, refused_log

log = structlog.get_logger(__name__)

# The log is rotated once it is this long (each line is a status and a newline).
ROTATE_AT_BYTES = 64 * 1024
COUNTS = "refusals.json"
_OLD = ".old"
# The words of the log that count: the statuses the front refuses with, and nothing else.
_COUNTED = frozenset(str(status) for status in REFUSALS)
# How often the tally reads on while the log is quiet: a scrape is at most this far behind the front.
_EVERY_S = 0.1
# How soon it reads on after a step that found lines: a burst is read as it comes, so the log
# holds its bound and what one such pause lets in, whatever the rate, not a whole quiet pause's worth.
_BUSY_EVERY_S = 0.005
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
        self._old_path = str(refused_log(front_dir)) + _OLD
        self._dir = os.open(front_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        # The counts are the folder's group's to read: the service's, whose workers serve /metrics.
        self._group = os.fstat(self._dir).st_gid
        self._reopen, self._holders = reopen, holders
        self._totals: Counter[str] = Counter()
        self._written: Counter[str] | None = None
        self._log: int | None = None
        self._offset = 0
        self._warned = False

    def run(self, stop: threading.Event) -> None:
        try:
            busy = False
            while not stop.wait(_BUSY_EVERY_S if busy else _EVERY_S):
                busy = self.step()
        finally:
            self.close()

    def close(self) -> None:
        if self._log is not None:
            os.close(self._log)
            self._log = None
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1

    def step(self) -> bool:
        """Count the lines written since the last step; rotate the log if it is past its bound.
        Whether it counted any refusal."""
        if self._log is None:
            self._log = self._open(REFUSED_LOG)
        if self._log is not None:
            self._count(self._log)
            if self._offset >= ROTATE_AT_BYTES:
                self._rotate(self._log)
        if self._totals == self._written:
            return False
        self._write()
        return True

    def _open(self, name: str) -> int | None:
        """The log, held by descriptor from now on; None until nginx has made it, or if it is not a file."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self._dir)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            fd = None
        if fd is not None and stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
        if fd is not None:
            os.close(fd)
        if not self._warned:
            log.warning("front_log_not_a_file", log=name)
            self._warned = True
        return None

    def _count(self, fd: int) -> None:
        data = os.pread(fd, max(0, os.fstat(fd).st_size - self._offset), self._offset)
        # A line the front is still writing is counted next time.
        whole = data[: data.rfind(b"\n") + 1]
        self._totals.update(word for word in whole.decode("ascii", "replace").split() if word in _COUNTED)
        self._offset += len(whole)

    def _rotate(self, held: int) -> None:
        os.rename(REFUSED_LOG, REFUSED_LOG + _OLD, src_dir_fd=self._dir, dst_dir_fd=self._dir)
        self._reopen()
        deadline = time.monotonic() + _REOPEN_S
        while self._held() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._held():
            log.warning("front_log_not_reopened", log=self._old_path, waited_s=_REOPEN_S)
        self._count(held)
        os.close(held)
        self._log = None
        os.unlink(REFUSED_LOG + _OLD, dir_fd=self._dir)
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
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == self._old_path:
                        return True
                except OSError:
                    pass  # closed meanwhile
        return False

    def _write(self) -> None:
        """The totals, replaced whole so that a scrape never reads half of them; made new each time."""
        new = COUNTS + ".new"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(new, dir_fd=self._dir)  # left by a tally that stopped midway
        fd = os.open(
            new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self._dir
        )
        try:
            os.write(fd, json.dumps(dict(sorted(self._totals.items()))).encode())
            # Read by gunicorn's workers, which run as the service's user, in the folder's group.
            if os.fstat(fd).st_gid != self._group:
                os.fchown(fd, -1, self._group)
            os.fchmod(fd, 0o640)
        finally:
            os.close(fd)
        os.replace(new, COUNTS, src_dir_fd=self._dir, dst_dir_fd=self._dir)
        self._written = Counter(self._totals)


def with_children(pid: int) -> list[int]:
    """`pid` and its children: nginx's master and its workers."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(child) for child in children)]
