"""The outbox worker's memory when its receiver answers every delivery with megabytes.

    python -m bench.answers                      # 10 MiB answers, 400 jobs
    python -m bench.answers --answer-mib 10 --jobs 400

A default `python -m webhooks worker` drains a backlog into bench.receiver
twice, a fresh worker each time: once answered with empty bodies (the
baseline, in the same run), once with bodies of `--answer-mib`. For each it
prints the worker's resident memory once warmed up (100 deliveries) and its
peak over the drain (the kernel's high-water mark, VmHWM), and the peak
against the baseline's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import outbox, servers

SECRET = "whsec_bench_answers"
DEFAULT_DATABASE = "postgresql://root@127.0.0.1:5432/test"


@dataclass
class Memory:
    answer_bytes: int
    jobs: int
    delivered: int
    # POSTs the receiver had: more than `jobs` if an answer cut short counted as a failure.
    posts: int
    warm_mib: float
    peak_mib: float


def _status_mib(pid: int, field: str) -> float:
    """A `Vm...` line of /proc/<pid>/status, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def measure(conninfo: str, answer_bytes: int, jobs: int) -> Memory:
    """One fresh worker, warmed up, then draining `jobs` into a receiver answering `answer_bytes` each."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-answers-") as workdir,
        outbox.running(conninfo, 1, SECRET, Path(workdir), answer_bytes=answer_bytes) as running,
    ):
        pid = running.procs[0].pid
        warm = _status_mib(pid, "VmRSS")
        drained = running.drain(jobs)
        return Memory(answer_bytes, jobs, drained.arrived, drained.posts, warm, _status_mib(pid, "VmHWM"))


def compare(conninfo: str, answer_bytes: int, jobs: int) -> tuple[Memory, Memory]:
    """The baseline (empty answers), then `answer_bytes` answers."""
    return measure(conninfo, 0, jobs), measure(conninfo, answer_bytes, jobs)


def table(baseline: Memory, large: Memory) -> str:
    rows = [
        "| receiver's answer | jobs delivered | worker RSS warmed up | worker peak RSS | peak vs empty |",
        "|---|---|---|---|---|",
    ]
    for memory in (baseline, large):
        size = f"{memory.answer_bytes / (1 << 20):g} MiB" if memory.answer_bytes else "empty"
        rows.append(
            f"| {size} | {memory.delivered} of {memory.jobs} | {memory.warm_mib:.0f} MiB "
            f"| {memory.peak_mib:.0f} MiB | {memory.peak_mib / baseline.peak_mib:.2f}x |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.answers", description=__doc__)
    parser.add_argument("--answer-mib", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--database", default=DEFAULT_DATABASE)
    args = parser.parse_args(argv)
    with servers.private_schema(args.database) as conninfo:
        baseline, large = compare(conninfo, int(args.answer_mib * (1 << 20)), args.jobs)
    print(table(baseline, large))
    return 0 if large.delivered == large.jobs and baseline.delivered == baseline.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
