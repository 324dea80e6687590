"""`webhooks allowlist refresh PROVIDER FILE`: a provider's source addresses, from the list it publishes.

Stripe publishes the addresses its webhooks come from
(https://stripe.com/files/ips/ips_webhooks.json, or the same as text,
ips_webhooks.txt); GitHub the networks its hooks come from (`hooks` in
https://api.github.com/meta). Download it, then:

    webhooks allowlist refresh stripe ips_webhooks.json
    webhooks allowlist refresh github meta.json

FILE is the provider's JSON document, or text with one address or network a
line. Every entry is checked before anything is written; a file with an
entry that is neither, or with none, changes nothing. The list is written to
WEBHOOK_ALLOWLIST_DIR, or over the one shipped with the service. `serve`
reads it when it starts (where the provider's list is on: STRIPE_WEBHOOK_ALLOWLIST,
GITHUB_WEBHOOK_ALLOWLIST): restart it to apply.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
from datetime import date
from pathlib import Path

from webhooks.infra.config import Settings, network
from webhooks.web import front

from .errors import CommandError


def published(provider: str, path: Path) -> list[str]:
    """The addresses and networks in a downloaded list, checked and sorted; CommandError names a bad one."""
    try:
        document = json.loads(path.read_text(errors="replace"))
    except ValueError:
        document = None  # text, one a line
    key = front.ALLOWLISTS[provider].key
    if isinstance(document, dict):
        if not isinstance(document.get(key), list):
            raise CommandError(f"{path}: no {key!r} list in it (is it {front.ALLOWLISTS[provider].url}?)")
        found = [_checked(path, f"{key} item {n}", item) for n, item in enumerate(document[key], 1)]
    elif isinstance(document, list):
        found = [_checked(path, f"item {n}", item) for n, item in enumerate(document, 1)]
    else:
        try:
            found = front.read_allowlist(path)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    if not found:
        raise CommandError(f"{path} lists no address: it would refuse every delivery")
    return sorted(set(found), key=lambda entry: _order(ipaddress.ip_network(entry)))


def _checked(path: Path, where: str, entry) -> str:
    if isinstance(entry, str):
        try:
            return network(entry)
        except ValueError as exc:
            raise CommandError(f"{path}: {where}: {exc}") from None
    raise CommandError(f"{path}: {where}: {entry!r} is not an IP address or network")


def _order(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> tuple:
    return net.version, net.network_address, net.prefixlen


def _refresh(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    source = Path(args.file)
    entries = published(args.provider, source)
    target = front.allowlist_path(settings, args.provider)
    try:
        before = set(front.read_allowlist(target))
    except (OSError, ValueError):
        before = set()
    header = [
        f"# The addresses {args.provider} sends webhook deliveries from, one a line",
        f"# (published at {front.ALLOWLISTS[args.provider].url}). Written by",
        f"# `webhooks allowlist refresh {args.provider} {source.name}` on {date.today().isoformat()}.",
    ]
    written = target.with_name(target.name + ".new")
    # Made new, never through a link: the folder may be one another user can write.
    written.unlink(missing_ok=True)
    front.write_new(written, "\n".join(header + entries) + "\n", 0o644)
    os.replace(written, target)
    added, removed = len(set(entries) - before), len(before - set(entries))
    print(
        f"{args.provider}: {len(entries)} addresses and networks written to {target} "
        f"({added} added, {removed} removed); restart serve to apply"
    )
    return 0


def register(commands) -> None:
    allowlist = commands.add_parser(
        "allowlist", help="the addresses a provider's deliveries come from, admitted at the front"
    )
    actions = allowlist.add_subparsers(dest="action", required=True)
    refresh = actions.add_parser(
        "refresh",
        help="replace a provider's list with the one it publishes, downloaded to FILE",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    refresh.add_argument("provider", choices=sorted(front.ALLOWLISTS))
    refresh.add_argument("file", metavar="FILE", help="the provider's list, as downloaded (JSON or text)")
    refresh.set_defaults(func=_refresh)
