"""What the commands that send deliveries (`replay`, `loadtest`) share: where to, and signed with what."""

from __future__ import annotations

import argparse

from webhooks.bootstrap import PROVIDERS
from webhooks.infra.config import Settings
from webhooks.providers.stripe import NAME

from .errors import CommandError


def local_url(provider: str = NAME) -> str:
    """The provider's URL on the service this machine runs (port from $PORT)."""
    return f"http://127.0.0.1:{Settings.from_env().port}/webhooks/{provider}"


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def command_parser(subparsers, name: str, doc: str, help: str) -> argparse.ArgumentParser:
    """A subcommand that sends as --provider to --url with --secret, by default the local service's."""
    parser = subparsers.add_parser(
        name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--provider",
        default=NAME,
        choices=PROVIDERS.names(),
        help="sign and send as this provider does (default: %(default)s)",
    )
    parser.add_argument(
        "--url",
        help="endpoint (default: http://127.0.0.1:$PORT/webhooks/PROVIDER, PORT 8000 unless set)",
    )
    parser.add_argument(
        "--secret",
        help="signing secret (default: the first of the provider's setting, e.g. $STRIPE_WEBHOOK_SECRET)",
    )
    return parser


def secret(args: argparse.Namespace, command: str) -> str:
    """--secret, else the first of the provider's configured secrets; one line if neither."""
    if args.secret:
        return args.secret
    provider = PROVIDERS[args.provider]
    configured = provider.secrets(Settings.from_env())
    if not configured:
        raise CommandError(f"{command}: no signing secret: pass --secret or set {provider.secret_setting}")
    return configured[0]


def url(args: argparse.Namespace) -> str:
    """--url, else the local service's URL for the provider."""
    return args.url or local_url(args.provider)
