"""`webhooks COMMAND` (`python -m webhooks COMMAND`): the operator's entry points, one module per command."""

from __future__ import annotations

import argparse
import os
import sys

from webhooks.infra.config import Process
from webhooks.infra.logs import configure as configure_logging

from . import (
    allowlist,
    backfill,
    db,
    errors,
    events,
    fulfil,
    install,
    loadtest,
    maintenance,
    migrate,
    outbox,
    prune,
    reconcile,
    replay,
    serve,
    subscriptions,
    worker,
)

# In the order `--help` lists them.
COMMANDS = (
    install,
    migrate,
    serve,
    db,
    worker,
    events,
    outbox,
    prune,
    maintenance,
    replay,
    loadtest,
    subscriptions,
    backfill,
    reconcile,
    fulfil,
    allowlist,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="webhooks", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    _import_from_cwd()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not hasattr(args, "extra_args"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra_args = extra
    return errors.run(_logged, args)


def _import_from_cwd() -> None:
    """The shop's handler modules (WEBHOOK_HANDLER_MODULES) are found from the current directory, as
    `python -m webhooks` finds them: the installed `webhooks` script would look only beside itself."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def _logged(args: argparse.Namespace) -> int:
    # Before anything logs: JSON lines, short tracebacks, no locals (so no payloads).
    configure_logging(Process.from_env().log_level)
    return args.func(args)
