"""`webhooks COMMAND` (`python -m webhooks COMMAND`): the operator's entry points, one module per command."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from webhooks.infra.config import Process
from webhooks.infra.logs import configure as configure_logging

from . import errors

# One module each, in the order `--help` lists them. A command imports its own module only:
# its start pays for what it uses (the Stripe SDK, pgqueuer, aiohttp), not for every command's.
COMMANDS = (
    "install",
    "migrate",
    "serve",
    "db",
    "worker",
    "events",
    "outbox",
    "prune",
    "maintenance",
    "replay",
    "loadtest",
    "subscriptions",
    "backfill",
    "reconcile",
    "fulfil",
    "allowlist",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's arguments, or those of the command `only` names."""
    parser = argparse.ArgumentParser(prog="webhooks", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"{__name__}.{name}").register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    _import_from_cwd()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args, extra = parser.parse_known_args(argv)
    if extra and not hasattr(args, "extra_args"):
        # The usage names every command, as it did before a command imported its own module only.
        build_parser().error(f"unrecognized arguments: {' '.join(extra)}")
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
