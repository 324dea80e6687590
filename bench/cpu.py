"""CPU seconds used by the processes of one benchmark row, read from /proc.

On a 2-core machine shared by the load generator, the web workers and
PostgreSQL, throughput is CPU per delivery in disguise; these figures say
which of the three a row's deliveries cost.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import psycopg

_TICKS = os.sysconf("SC_CLK_TCK")


def seconds(pids: list[int]) -> float:
    """User + system CPU of `pids` (a process that is gone counts as 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def backends(conninfo: str, application_name: str) -> list[int]:
    """Server processes of our connections; empty when the server is on another host."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        pids = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application_name]
        ).fetchall()
    return [pid for (pid,) in pids if Path(f"/proc/{pid}").exists()]


def machine_jiffies() -> tuple[int, int]:
    """(idle, all) clock ticks of every core since boot, from /proc/stat."""
    ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # idle + iowait; of all, the first eight fields: guest time is already in user
    return ticks[3] + ticks[4], sum(ticks[:8])


def idle_share(start: tuple[int, int], end: tuple[int, int]) -> float:
    """The share of the machine's CPU time left idle between two readings."""
    return (end[0] - start[0]) / max(end[1] - start[1], 1)


def own_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def instructions_unsupported() -> str | None:
    """Why `perf stat -e instructions` cannot count here (no perf, no hardware counters), or None."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: linux-perf)"
    done = subprocess.run(
        ["perf", "stat", "-x", ",", "-e", "instructions", "true"], capture_output=True, text=True
    )
    if done.returncode != 0 or _instructions(done.stderr) is None:
        return "`perf stat -e instructions` is not supported on this machine (no hardware counters exposed)"
    return None


def _instructions(perf_csv: str) -> int | None:
    """The instruction count in `perf stat -x ,` output; None when perf printed <not supported> or
    <not counted>."""
    for line in perf_csv.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions"):
            return int(fields[0]) if fields[0].isdigit() else None
    return None


class _PerfCount:
    """Instructions retired by `pids` (their threads included) while the block runs."""

    def __init__(self, pids: list[int]):
        self.proc = subprocess.Popen(
            ["perf", "stat", "-x", ",", "-e", "instructions", "-p", ",".join(map(str, pids))],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> float:
        self.proc.send_signal(signal.SIGINT)  # perf prints its counts and exits
        count = _instructions(self.proc.communicate(timeout=30)[1])
        return float("nan") if count is None else float(count)


class Meter:
    """CPU used during a block by web workers, their backends, the front (nginx)
    and this process, and the share of the machine left idle (a row bound by
    one thread leaves cores idle; a row bound by the machine's CPU leaves none).

    With `instructions`, also the instructions each part retired (perf stat):
    unlike CPU time, a count that other load on the machine does not move.
    """

    def __init__(
        self, workers: list[int], backend_pids: list[int], front: list[int] = (), instructions: bool = False
    ):
        self.workers, self.backend_pids, self.front = workers, backend_pids, list(front)
        self.used: dict[str, float] = {}
        self.instructions: dict[str, float] = {}
        self.idle = float("nan")
        self._count_instructions = instructions

    def __enter__(self):
        self._perf = {}
        if self._count_instructions:
            parts = {"workers": self.workers, "postgres": self.backend_pids, "front": self.front}
            self._perf = {part: _PerfCount(pids) for part, pids in parts.items() if pids}
        self._start, self._machine = self._now(), machine_jiffies()
        return self

    def __exit__(self, *exc):
        self.used = {k: end - self._start[k] for k, end in self._now().items()}
        self.idle = idle_share(self._machine, machine_jiffies())
        self.instructions = {part: perf.stop() for part, perf in self._perf.items()}

    def _now(self) -> dict[str, float]:
        return {
            "workers": seconds(self.workers),
            "postgres": seconds(self.backend_pids) if self.backend_pids else float("nan"),
            "front": seconds(self.front) if self.front else float("nan"),
            "client": own_seconds(),
        }
