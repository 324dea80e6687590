"""`webhooks COMMAND` (`python -m webhooks COMMAND`): the operator's entry points, one module per command."""

from __future__ import annotations

import argparse
import os

from webhooks.infra.logs import configure as configure_logging

from . import (
    allowlist,
    backfill,
    db,
    errors,
    events,
    loadtest,
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
    migrate,
    serve,
    db,
    worker,
    events,
    outbox,
    prune,
    replay,
    loadtest,
    subscriptions,
    backfill,
    reconcile,
    allowlist,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="webhooks", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not hasattr(args, "extra_args"):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra_args = extra
    return errors.run(_logged, args)


def _logged(args: argparse.Namespace) -> int:
    # Before anything logs: JSON lines, short tracebacks, no locals (so no payloads).
    configure_logging(os.environ.get("LOG_LEVEL", "INFO"))
    return args.func(args)
