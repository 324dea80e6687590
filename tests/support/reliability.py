"""The reliability suite's measured figures, and the command that publishes them.

    python -m tests.support.reliability           # run the fault, serving, hostile-input and security tests,
                                          # render the doc
    python -m tests.support.reliability --full    # the same with full-size loads (minutes, not seconds)
    python -m tests.support.reliability --render  # render from the last run's results (e.g. ./bin/test's)

The tests record what they measured as they assert it; the doc's table is
rendered from those records only, so no figure in it is typed by hand.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import databases

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
DEFAULT_RESULTS = ROOT / ".data" / "reliability-results.jsonl"
MODULES = (
    "tests/test_faults.py",
    "tests/web/test_serving.py",
    "tests/web/test_front.py",
    "tests/web/test_edge.py",
    "tests/web/test_hostile_input.py",
    "tests/test_security.py",
    "tests/test_failover.py",
    "tests/test_partitions.py",
)
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
FULL = os.environ.get("RELIABILITY_FULL") == "1"


def sized(short, full):
    """The CI size of a load, or the full one under `--full`."""
    return full if FULL else short


class Results:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def fresh(cls) -> Results:
        """The results file, emptied by the first process of this run to record: xdist's
        workers and bin/test's two passes are one run, and each adds its rows."""
        path = Path(os.environ.get("RELIABILITY_RESULTS") or DEFAULT_RESULTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".run"), "a+") as run:
            fcntl.flock(run, fcntl.LOCK_EX)
            run.seek(0)
            if run.read() != databases.RUN:
                path.write_text("")
                run.truncate(0)
                run.write(databases.RUN)
        return cls(path)

    def for_test(self, test: str) -> Figures:
        return Figures(self, test)

    def append(self, row: dict) -> None:
        with self.path.open("a") as file:
            file.write(json.dumps(row) + "\n")

    def rows(self) -> list[dict]:
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]


class Figures:
    def __init__(self, results: Results, test: str):
        self._results = results
        self._test = test

    def record(self, case: str, invariant: str, figure: str, **numbers) -> None:
        """One table row: the fault or input, the invariant the test asserted, what it measured."""
        self._results.append(
            {
                "test": self._test,
                "case": case,
                "invariant": invariant,
                "figure": figure,
                "numbers": numbers,
                "full": FULL,
            }
        )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(rows: list[dict]) -> str:
    order = {module: i for i, module in enumerate(MODULES)}
    rows = sorted(rows, key=lambda r: order.get(r["test"].split("::")[0], len(order)))
    scale = "full" if any(r["full"] for r in rows) else "CI"
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, {scale} sizes, "
        f"{len(rows)} rows from {len({r['test'] for r in rows})} tests.",
        "",
        "| fault / input | invariant (asserted) | measured |",
        "|---|---|---|",
    ]
    lines += [f"| {_cell(r['case'])} | {_cell(r['invariant'])} | {_cell(r['figure'])} |" for r in rows]
    return "\n".join(lines)


def render(rows: list[dict], doc: Path = DOC) -> None:
    text = doc.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{BEGIN}\n{render_table(rows)}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.reliability",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--full", action="store_true", help="full-size loads and more examples")
    parser.add_argument("--render", action="store_true", help="only render the last results")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = parser.parse_args(argv)
    if args.render:
        render(Results(DEFAULT_RESULTS).rows())
        return 0
    results = Path(tempfile.mkdtemp()) / "results.jsonl"
    env = {**os.environ, "RELIABILITY_RESULTS": str(results), "RELIABILITY_FULL": "1" if args.full else "0"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *MODULES, *args.pytest_args], cwd=ROOT, env=env
    )
    if run.returncode != 0:
        print("tests failed: docs/reliability.md left as it was", file=sys.stderr)
        return run.returncode
    render(Results(results).rows())
    print(f"rendered {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
