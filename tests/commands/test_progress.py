"""backfill, reconcile and prune show progress on stderr while stdout is a terminal, nothing in a pipe."""

import os
import pty
import subprocess
import sys

import pytest

from tests import conftest
from tests.commands.test_backfill import payments
from tests.support.stripe_api import api_env, stand_in  # noqa: F401  (fixture)

RUNS = [
    (["backfill", "--since", "72h"], "listing Stripe's events"),
    (["reconcile", "--since", "72h"], "listing /v1/"),
    (["prune", "--older-than", "30d"], "deleting"),
]


def run(argv: list[str], env: dict[str, str], terminal: bool) -> subprocess.CompletedProcess:
    """The command with stdout on a pseudo-terminal (as in a shell) or a pipe; stderr read either way."""
    main, side = pty.openpty() if terminal else (None, subprocess.PIPE)
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "webhooks", *argv],
            cwd=conftest.ROOT,
            env={**os.environ, **env},
            stdout=side,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        if main is not None:
            os.close(side)
            os.close(main)
    return ran


@pytest.mark.parametrize(("argv", "shown"), RUNS, ids=[argv[0] for argv, _ in RUNS])
def test_progress_shows_on_a_terminal_and_not_in_a_pipe(argv, shown, stand_in, database_url):  # noqa: F811
    stand_in.add("events", *payments(3))
    env = {**conftest.service_env(database_url), **api_env(stand_in)}
    watched = run(argv, env, terminal=True)
    assert watched.returncode in (0, 1) and shown in watched.stderr, watched.stderr
    piped = run(argv, env, terminal=False)
    assert piped.returncode == watched.returncode and piped.stderr == "", piped.stderr
