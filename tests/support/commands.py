"""`python -m webhooks ...` run as an operator runs it: its own process, from the project root by default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# What a process started with `inherit=False` sees besides its settings: no
# stray STRIPE_API_KEY or DATABASE_URL from the shell running the tests.
PLAIN_PATH = "/usr/bin:/bin"


def command(
    *argv: str, cwd: Path = ROOT, module: str = "webhooks", inherit: bool = True, **env: str
) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGV` with `env` over the tests' environment, or over a plain PATH alone."""
    base = os.environ if inherit else {"PATH": PLAIN_PATH}
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
