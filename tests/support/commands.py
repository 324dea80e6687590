"""`webhooks ...` as an operator runs it, or called in the test's process.

`command` starts `python -m webhooks ARGV` as its own process, from the
project root by default: for what only a process shows (its exit status and
one-line error as a shell sees them, stdout and stderr apart, an embedded
server it starts, signals). `called` calls `webhooks.commands.main(ARGV)` in
this process, with the same environment and the same answer, where the
process boundary is not what the test is about: a start of Python and of the
package is most of a short command's time.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

from webhooks.commands import main

ROOT = Path(__file__).resolve().parent.parent.parent
# What a process started with `inherit=False` sees besides its settings: no
# stray STRIPE_API_KEY or DATABASE_URL from the shell running the tests.
PLAIN_PATH = "/usr/bin:/bin"


def _environment(inherit: bool, env: dict[str, str]) -> dict[str, str]:
    base = os.environ if inherit else {"PATH": PLAIN_PATH}
    return {**base, "PYTHONPATH": str(ROOT), **env}


def command(
    *argv: str, cwd: Path = ROOT, module: str = "webhooks", inherit: bool = True, **env: str
) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGV` with `env` over the tests' environment, or over a plain PATH alone."""
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=cwd,
        env=_environment(inherit, env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextlib.contextmanager
def _as_a_process_would(cwd: Path, environment: dict[str, str]):
    """This process's environment, folder and import path as `command`'s process would have them."""
    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    os.environ.clear()
    os.environ.update(environment)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path


def called(*argv: str, cwd: Path = ROOT, inherit: bool = True, **env: str) -> subprocess.CompletedProcess:
    """`webhooks.commands.main(ARGV)` in this process, answered as `command` answers: its exit
    status and what it wrote to stdout (its log lines among it) and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with (
        _as_a_process_would(cwd, _environment(inherit, env)),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(["webhooks", *argv], code, out.getvalue(), err.getvalue())
