"""Settings read from the environment, once, into an immutable object."""

from __future__ import annotations

import base64
import ipaddress
import math
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import stripe
from psycopg import conninfo

from .errors import PublicError


class SettingError(PublicError, ValueError):
    """A variable set to something it cannot be: the message names the variable, never a secret's value."""


def _csv(raw: str | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in (raw or "").split(",") if s.strip())


STRIPE_MODES = ("test", "live")
_SPAN = re.compile(r"(\d+)([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_span(text: str) -> timedelta:
    """`3d`, `2h`, `90m` or `45s` as a timedelta; ValueError for anything else."""
    match = _SPAN.fullmatch(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a span like 30d, 12h, 90m or 45s")
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


def parse_instant(text: str) -> datetime:
    """A span back from now (`1h`) or an ISO-8601 time (UTC unless it says otherwise); ValueError else."""
    try:
        return datetime.now(UTC) - parse_span(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is neither a span (1h) nor an ISO time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _whole(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a whole number") from None


def _number(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{raw!r} is not a number") from None


def _port(raw: str) -> int:
    port = _whole(raw)
    if not 1 <= port <= 65535:
        raise ValueError(f"{port} is not a port number (1 to 65535)")
    return port


# The parsers below check what the front's config (webhooks/web/front.py) is
# rendered from, so that nginx is never handed a value it refuses in twenty
# lines, or one that smuggles in a directive of its own; every process
# refuses them alike, at start.


def _at_least(least: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        number = _whole(raw)
        if number < least:
            raise ValueError(f"must be at least {least}, not {number}")
        return number

    return parse


def _seconds(raw: str) -> float:
    """A timeout the front renders in milliseconds: from 1 ms to an hour."""
    seconds = _number(raw)
    if not (math.isfinite(seconds) and 0.001 <= seconds <= 3600):
        raise ValueError(f"{raw!r} is not a timeout from 0.001 to 3600 seconds")
    return seconds


_HOSTNAME = re.compile(
    r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def _unscoped(found: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """ValueError for an IPv6 scope id: Python takes any text after `%` as one, `;` and all."""
    if getattr(found, "scope_id", None) is not None:
        raise ValueError(f"{str(found)!r} has a scope id (%...): name the address without one")


def _ip_address(raw: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An IP address without a scope id; ValueError for anything else."""
    found = ipaddress.ip_address(raw)
    _unscoped(found)
    return found


def _host(raw: str) -> str:
    """An IP address or a host name, as a listener is given one, written back from what it parsed to."""
    if "%" in raw:
        raise ValueError(f"{raw!r} has a scope id (%...): name the address without one")
    try:
        return str(_ip_address(raw))
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(raw):
        raise ValueError(f"{raw!r} is not an IP address or a host name")
    return raw


# Characters that would end or change a value written into nginx.conf.
_UNSAFE_IN_CONFIG = re.compile(r"[\s;{}'\"$#\\\x00-\x1f\x7f]")


def _folder(raw: str) -> str:
    if not raw.startswith("/") or _UNSAFE_IN_CONFIG.search(raw):
        raise ValueError(f"{raw!r} is not an absolute path without spaces, quotes or ;{{}}$#")
    return raw


def _positive(raw: str) -> float:
    """A duration or interval in seconds: more than zero, and finite."""
    number = _number(raw)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"must be more than 0 seconds, not {raw!r}")
    return number


def _text(raw: str) -> str:
    """Any text: a name, a path or a token that nothing here can judge."""
    return raw


def _prefixed_csv(*prefixes: str, what: str) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list, every item starting with one of `prefixes`; the message quotes none."""

    def parse(raw: str) -> tuple[str, ...]:
        items = _csv(raw)
        for position, item in enumerate(items, 1):
            if not item.startswith(prefixes):
                raise ValueError(
                    f"item {position} is not {what} (it does not start with {' or '.join(prefixes)})"
                )
        return items

    return parse


# Stripe's API keys pasted where an endpoint's signing secret belongs: every
# delivery would be refused 400, so the line says what was pasted.
_API_KEY_PREFIXES = tuple(f"{kind}_{mode}_" for kind in ("sk", "rk", "pk") for mode in ("test", "live"))


def _signing_secrets(raw: str) -> tuple[str, ...]:
    """Stripe endpoint signing secrets, whsec_... (docs.stripe.com/webhooks#verify-events)."""
    for item in _csv(raw):
        if item.startswith(_API_KEY_PREFIXES):
            raise ValueError(
                f"{item[: item.index('_', 3) + 1]}... is a Stripe API key, not an endpoint's signing secret: "
                "use the whsec_... of the endpoint (Dashboard, or `stripe listen`)"
            )
    return _prefixed_csv("whsec_", what="an endpoint's signing secret, whsec_...")(raw)


def _standard_secrets(raw: str) -> tuple[str, ...]:
    """Standard Webhooks secrets: whsec_ then base64, as the spec's libraries take them."""
    items = _prefixed_csv("whsec_", what="a Standard Webhooks secret, whsec_<base64>")(raw)
    for position, item in enumerate(items, 1):
        try:
            base64.b64decode(item.removeprefix("whsec_"), validate=True)
        except ValueError:
            raise ValueError(f"item {position} is not whsec_ followed by base64") from None
    return items


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _modules(raw: str) -> tuple[str, ...]:
    names = _csv(raw)
    for name in names:
        if not _MODULE.fullmatch(name):
            raise ValueError(f"{name!r} is not a module name like shop.handlers")
    return names


# Whitespace and control characters: nowhere in a URL, and CR/LF would split a request line.
_NOT_IN_URL = re.compile(r"[\s\x00-\x1f\x7f]")


def _http_url(raw: str) -> str:
    """An http:// or https:// URL, parsed whole: scheme, host (a name or an address), port.

    The messages quote the host at most: a URL may carry a password.
    """
    text = raw.strip()
    if _NOT_IN_URL.search(text):
        raise ValueError("has whitespace or a control character in it: not an http:// or https:// address")
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("is not an http:// or https:// address with a host")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"the port after {parts.hostname!r} is not a port number (1 to 65535)")
    try:
        _host(parts.hostname)
    except ValueError:
        raise ValueError(f"{parts.hostname!r} is not an IP address or a host name") from None
    return text


def _metadata_key(raw: str) -> str:
    """A Stripe metadata key: at most 40 characters, no square brackets (docs.stripe.com/metadata)."""
    if len(raw) > 40 or "[" in raw or "]" in raw:
        raise ValueError(f"{raw!r} is not a metadata key (at most 40 characters, no square brackets)")
    return raw


_API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(\.[a-z]+)?")


def _api_version(raw: str) -> str:
    if not _API_VERSION.fullmatch(raw.strip()):
        raise ValueError(f"{raw!r} is not a Stripe API version like 2026-10-28.endive")
    return raw.strip()


def _api_key(raw: str) -> str:
    """A secret or restricted key: a publishable one (pk_) reads nothing."""
    if not re.fullmatch(r"(sk|rk)_(test|live)_\S+", raw):
        raise ValueError("not a secret or restricted API key (sk_... or rk_..., test or live)")
    return raw


def _admin_token(raw: str) -> str:
    # The console can reprocess and requeue payments: a short token is guessed.
    if len(raw) < 16:
        raise ValueError("shorter than 16 characters: use a long random one (openssl rand -hex 32)")
    return raw


_FLAGS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


def _flag(raw: str) -> bool:
    try:
        return _FLAGS[raw.strip().lower()]
    except KeyError:
        raise ValueError(f"{raw!r} is not on or off (also true/false, yes/no, 1/0)") from None


def network(raw: str) -> str:
    """An IP address or network (`203.0.113.7`, `10.0.0.0/8`, `2600:1f18::/32`), as nginx writes it."""
    text = raw.strip()
    if "%" in text:
        raise ValueError(f"{text!r} has a scope id (%...): name the address or network without one")
    try:
        found = ipaddress.ip_network(text, strict=False)
        _unscoped(found.network_address)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address or network") from None
    return str(found.network_address) if found.prefixlen == found.max_prefixlen else str(found)


def _networks(raw: str) -> tuple[str, ...]:
    return tuple(network(item) for item in _csv(raw))


# A user name as useradd takes it, which is also safe to write into nginx.conf.
_USER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")


def _user_name(raw: str) -> str:
    if not _USER_NAME.fullmatch(raw):
        raise ValueError(f"{raw!r} is not a user name (letters, digits, '_', '-' and '.')")
    return raw


def _stripe_mode(raw: str) -> str:
    mode = raw.strip().lower()
    if mode not in STRIPE_MODES:
        raise ValueError(f"must be one of {', '.join(STRIPE_MODES)}, not {mode!r}")
    return mode


def _version_range(raw: str) -> tuple[str, str]:
    """ "OLDEST..NEWEST" as two API version dates (YYYY-MM-DD), oldest first."""
    first, sep, last = raw.strip().partition("..")
    try:
        bounds = tuple(date.fromisoformat(d.strip()[:10]).isoformat() for d in (first, last))
    except ValueError:
        bounds = ()
    if not sep or len(bounds) != 2 or bounds[0] > bounds[1]:
        raise ValueError(f"must be OLDEST..NEWEST dates, not {raw!r}")
    return bounds


# The API version the installed stripe library is generated from and sends:
# the newest whose shapes the handlers are known to read. Read from the
# library, never copied, so upgrading it moves the range and the pin with it;
# tests/domains/stripe/test_api_version.py fails until Stripe's changelog up to it is
# reviewed (docs/events.md, "API versions and payload shapes").
STRIPE_LIBRARY_API_VERSION: str = stripe.api_version


# libpq waits for ever on a host that does not answer, and psycopg, which
# tries the hosts of a multi-host URL one by one, over two minutes: a dead
# first host would stall every new connection before the next was tried.
# libpq's minimum, per host (docs/failover.md).
CONNECT_TIMEOUT_S = 2


def _database_url(raw: str) -> str:
    """DATABASE_URL, with connect_timeout unless it sets one, and for several hosts
    target_session_attrs=read-write unless it sets one: the service writes, so
    after a failover it must land on the promoted server, never a standby."""
    try:
        params = conninfo.conninfo_to_dict(raw)
    except Exception:
        # libpq's reason quotes the text, password and all.
        raise ValueError("not a PostgreSQL URL like postgresql://USER:PASSWORD@HOST:5432/DBNAME") from None
    defaults = {"connect_timeout": str(CONNECT_TIMEOUT_S)}
    if "," in f"{params.get('host') or ''}{params.get('hostaddr') or ''}":
        defaults["target_session_attrs"] = "read-write"
    missing = {name: value for name, value in defaults.items() if name not in params}
    return conninfo.make_conninfo(raw, **missing) if missing else raw


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    # The other providers' secrets (webhooks/providers/): a provider
    # without one is refused at its URL.
    shopify_webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    github_webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    standard_webhooks_secrets: tuple[str, ...] = field(default=(), repr=False)
    # The public address: the front (nginx) listens there, or gunicorn alone
    # where a platform's router already buffers requests.
    host: str = "0.0.0.0"
    port: int = 8000
    # /metrics has a listener of its own, for the scraper; the public one has no /metrics.
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 9464
    # Set by `serve` for gunicorn behind the front: the folder holding the
    # Unix socket gunicorn listens on and the front's log of the requests it
    # refused (counted in /metrics). Unset, gunicorn listens on host:port.
    front_dir: str | None = None
    # Connections the front holds open in all, and per client address once
    # its request head is in (nginx's limit_conn).
    front_connections: int = 8192
    front_connections_per_client: int = 512
    # The front admits a provider's deliveries only from the addresses it
    # publishes (webhooks/web/allowlists/), when its list is on.
    stripe_allowlist: bool = False
    github_allowlist: bool = False
    # Where those lists are (stripe.txt, github.txt); unset, the ones shipped
    # in webhooks/web/allowlists/. `webhooks allowlist refresh` writes there.
    allowlist_dir: str | None = None
    # Proxies (load balancers) in front of the front, as addresses or
    # networks: from them, the client is the address they pass on
    # (X-Forwarded-For, or the PROXY protocol when proxy_protocol is on), and
    # the per-client limits and allowlists apply to it.
    trusted_proxies: tuple[str, ...] = ()
    proxy_protocol: bool = False
    # The front's binary: a name looked up on PATH (and in /usr/sbin), or a path.
    nginx: str = "nginx"
    # Stripe's own default; a delivery signed longer ago than this is a replay.
    signature_tolerance_s: int = 300
    max_body_bytes: int = 512 * 1024
    # The front closes a connection whose request head is not in this long
    # after it opened, whose body stalls this long between two reads, or
    # whose client stops reading its answer this long.
    request_read_timeout_s: float = 10.0
    # How long a duplicate waits for an in-flight claim before answering 409.
    lock_timeout_ms: int = 1000
    # Bounds on how long a stuck worker can hold a claim.
    statement_timeout_ms: int = 10_000
    idle_in_transaction_timeout_ms: int = 15_000
    pool_min_size: int = 1
    pool_max_size: int = 2
    # How long a delivery waits for a pooled connection: with the database
    # down or refusing, this is what a 503 takes, so it stays well under 1 s.
    pool_timeout_s: float = 0.5
    # A database connection whose peer fell silent (a partition, a host gone
    # without a word) is given up within about this long, by the kernel
    # (libpq's keepalives and tcp_user_timeout, db.network_options), not
    # after the system's quarter of an hour of retransmissions. What
    # DATABASE_URL sets itself wins.
    db_dead_peer_s: float = 10.0
    data_dir: str = ".data"
    # Started as root, gunicorn's workers run as this user, and nginx's as
    # the front's user in this user's group, the one gunicorn's socket is
    # shared with; each is made if missing (webhooks/infra/privilege.py).
    service_user: str = "webhooks"
    front_user: str = "webhooks-front"
    # Modules imported at start-up so their @fulfilment.handles handlers register.
    handler_modules: tuple[str, ...] = ()
    # Events whose livemode differs are refused: a test payment must never
    # ship a live order, and a live one must not vanish into a test database.
    stripe_mode: str = "test"
    # The metadata key that makes a PaymentIntent outside Checkout a one-off
    # order (webhooks/domains/stripe/orders.py).
    order_marker_key: str = "order_id"
    # The API versions whose payload shapes the handlers know, as inclusive
    # dates: pre-basil (charges' refund lists, `invoice` on PaymentIntents)
    # through the installed stripe library's. An event of a newer version is
    # applied if its object has the declared shape (domains/stripe/versions.py);
    # one of an older version, or a newer one of another shape, is refused.
    stripe_api_versions: tuple[str, str] = ("2020-08-27", STRIPE_LIBRARY_API_VERSION[:10])
    # Outbox worker: where side effects are POSTed and how failures are retried.
    outbox_url: str | None = None
    outbox_max_attempts: int = 8
    outbox_backoff_base_s: float = 1.0
    outbox_backoff_max_s: float = 300.0
    outbox_http_timeout_s: float = 10.0
    # An idle worker looks for new jobs this often: no NOTIFY per job wakes it
    # (migrations/0040_outbox_without_notify_trigger.sql), so this is the wake-up latency.
    outbox_poll_s: float = 0.1
    # A job picked by a worker that stopped heartbeating is retaken after this.
    outbox_heartbeat_timeout_s: float = 30.0
    # Jobs a worker claims in one dequeue; four times as many may be in flight.
    outbox_concurrency: int = 16
    # /admin answers only with this token; unset, the page does not exist.
    admin_token: str | None = field(default=None, repr=False)
    # Payload keys `prune` replaces in stored payloads older than its redaction window.
    redact_fields: tuple[str, ...] = ()
    # Subscription access (the `subscription_access` view): how long a
    # past_due subscription keeps access while Stripe retries, and how long
    # after a paid period ends its renewal may take to be paid.
    subscription_grace: timedelta = timedelta(days=3)
    subscription_renewal_margin: timedelta = timedelta(hours=2)
    # How often each outbox worker tells the access flips that time alone made.
    access_sweep_s: float = 60.0
    # Stripe's API, for backfill, reconcile and the thin-event fetch job: a
    # restricted read key, the API version every fetched object is rendered in
    # (the handlers' shapes), and the base address (tests and staging point
    # it elsewhere).
    stripe_api_key: str | None = field(default=None, repr=False)
    stripe_api_version: str = STRIPE_LIBRARY_API_VERSION
    stripe_api_base: str = "https://api.stripe.com"
    stripe_api_timeout_s: float = 30.0
    # The stripe library's own retries (with its backoff) of a 409, 429, 5xx
    # or connection error, before a call counts as failed.
    stripe_api_retries: int = 2
    # Connect: the connected accounts whose events and objects are read with
    # Stripe-Account, besides the platform's own.
    stripe_connect_accounts: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Each variable set and not empty overrides its field's default; SettingError names a bad one.

        Every variable's rule (_FROM_ENV), then the rules between variables
        (_RELATIONS): a value no delivery could succeed with stops the
        process before it serves.
        """
        settings = cls(**_read(_FROM_ENV, os.environ if env is None else env))
        for check in _RELATIONS:
            wrong = check(settings)
            if wrong:
                raise SettingError(wrong)
        return settings


def _read(table: Mapping[str, tuple[str, Callable[[str], Any]]], env: Mapping[str, str]) -> dict[str, Any]:
    """field -> value for each variable of `table` set and not empty in `env`."""
    return {
        name: _parsed(variable, parse, env[variable])
        for name, (variable, parse) in table.items()
        if env.get(variable)
    }


def _parsed(variable: str, parse: Callable[[str], Any], raw: str) -> Any:
    try:
        return parse(raw)
    except ValueError as exc:
        raise SettingError(f"{variable}: {exc}") from None


# field -> (environment variable, parser): the one table of what each variable may be.
_FROM_ENV: dict[str, tuple[str, Callable[[str], Any]]] = {
    "database_url": ("DATABASE_URL", _database_url),
    "webhook_secrets": ("STRIPE_WEBHOOK_SECRET", _signing_secrets),
    "shopify_webhook_secrets": ("SHOPIFY_WEBHOOK_SECRET", _csv),
    "github_webhook_secrets": ("GITHUB_WEBHOOK_SECRET", _csv),
    "standard_webhooks_secrets": ("STANDARD_WEBHOOKS_SECRET", _standard_secrets),
    "host": ("HOST", _host),
    "port": ("PORT", _port),
    "metrics_host": ("METRICS_HOST", _host),
    "metrics_port": ("METRICS_PORT", _port),
    "front_dir": ("WEBHOOK_FRONT_DIR", _folder),
    "front_connections": ("WEBHOOK_FRONT_CONNECTIONS", _at_least(16)),
    "front_connections_per_client": ("WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT", _at_least(1)),
    "stripe_allowlist": ("STRIPE_WEBHOOK_ALLOWLIST", _flag),
    "github_allowlist": ("GITHUB_WEBHOOK_ALLOWLIST", _flag),
    "allowlist_dir": ("WEBHOOK_ALLOWLIST_DIR", _text),
    "trusted_proxies": ("WEBHOOK_TRUSTED_PROXIES", _networks),
    "proxy_protocol": ("WEBHOOK_PROXY_PROTOCOL", _flag),
    "nginx": ("WEBHOOK_NGINX", _text),
    "signature_tolerance_s": ("WEBHOOK_TOLERANCE_SECONDS", _at_least(1)),
    "max_body_bytes": ("WEBHOOK_MAX_BODY_BYTES", _at_least(1)),
    "request_read_timeout_s": ("WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS", _seconds),
    # PostgreSQL reads 0 as "no timeout": never what these bounds are for.
    "lock_timeout_ms": ("WEBHOOK_LOCK_TIMEOUT_MS", _at_least(1)),
    "statement_timeout_ms": ("WEBHOOK_STATEMENT_TIMEOUT_MS", _at_least(1)),
    "idle_in_transaction_timeout_ms": ("WEBHOOK_IDLE_IN_TRANSACTION_TIMEOUT_MS", _at_least(1)),
    "pool_min_size": ("WEBHOOK_POOL_MIN_SIZE", _at_least(1)),
    "pool_max_size": ("WEBHOOK_POOL_MAX_SIZE", _at_least(1)),
    "pool_timeout_s": ("WEBHOOK_POOL_TIMEOUT_SECONDS", _positive),
    "db_dead_peer_s": ("WEBHOOK_DB_DEAD_PEER_SECONDS", _positive),
    "data_dir": ("WEBHOOK_DATA_DIR", _text),
    "service_user": ("WEBHOOK_SERVICE_USER", _user_name),
    "front_user": ("WEBHOOK_FRONT_USER", _user_name),
    "handler_modules": ("WEBHOOK_HANDLER_MODULES", _modules),
    "stripe_mode": ("STRIPE_MODE", _stripe_mode),
    "order_marker_key": ("WEBHOOK_ORDER_MARKER_KEY", _metadata_key),
    "stripe_api_versions": ("STRIPE_API_VERSIONS", _version_range),
    "outbox_url": ("WEBHOOK_OUTBOX_URL", _http_url),
    "outbox_max_attempts": ("WEBHOOK_OUTBOX_MAX_ATTEMPTS", _at_least(1)),
    "outbox_backoff_base_s": ("WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS", _positive),
    "outbox_backoff_max_s": ("WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS", _positive),
    "outbox_http_timeout_s": ("WEBHOOK_OUTBOX_HTTP_TIMEOUT_SECONDS", _positive),
    "outbox_poll_s": ("WEBHOOK_OUTBOX_POLL_SECONDS", _positive),
    "outbox_heartbeat_timeout_s": ("WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS", _positive),
    "outbox_concurrency": ("WEBHOOK_OUTBOX_CONCURRENCY", _at_least(1)),
    "admin_token": ("WEBHOOK_ADMIN_TOKEN", _admin_token),
    "redact_fields": ("WEBHOOK_REDACT_FIELDS", _csv),
    "subscription_grace": ("WEBHOOK_SUBSCRIPTION_GRACE", parse_span),
    "subscription_renewal_margin": ("WEBHOOK_SUBSCRIPTION_RENEWAL_MARGIN", parse_span),
    "access_sweep_s": ("WEBHOOK_ACCESS_SWEEP_SECONDS", _positive),
    "stripe_api_key": ("STRIPE_API_KEY", _api_key),
    "stripe_api_version": ("STRIPE_API_VERSION", _api_version),
    "stripe_api_base": ("STRIPE_API_BASE", _http_url),
    "stripe_api_timeout_s": ("STRIPE_API_TIMEOUT_SECONDS", _positive),
    "stripe_api_retries": ("STRIPE_API_RETRIES", _at_least(0)),
    "stripe_connect_accounts": (
        "STRIPE_CONNECT_ACCOUNTS",
        _prefixed_csv("acct_", what="an account id, acct_..."),
    ),
}


def _same_listener(s: Settings) -> str | None:
    wildcard = {"0.0.0.0", "::"}
    hosts = {s.host, s.metrics_host}
    if s.port == s.metrics_port and (len(hosts) == 1 or hosts & wildcard):
        return f"METRICS_PORT: {s.metrics_port} is PORT too: the scraper's listener needs a port of its own"
    return None


def _key_mode(s: Settings) -> str | None:
    mode = s.stripe_api_key.split("_")[1] if s.stripe_api_key else s.stripe_mode
    if mode != s.stripe_mode:
        return f"STRIPE_API_KEY: a {mode} key, but STRIPE_MODE is {s.stripe_mode}: use a {s.stripe_mode} key"
    return None


# The rules between variables, each a line naming what is wrong, or None.
_RELATIONS: tuple[Callable[[Settings], str | None], ...] = (
    lambda s: (
        f"WEBHOOK_POOL_MIN_SIZE: {s.pool_min_size} is more than WEBHOOK_POOL_MAX_SIZE ({s.pool_max_size})"
        if s.pool_min_size > s.pool_max_size
        else None
    ),
    lambda s: (
        f"WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS: {s.outbox_backoff_base_s:g} is more than "
        f"WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS ({s.outbox_backoff_max_s:g})"
        if s.outbox_backoff_base_s > s.outbox_backoff_max_s
        else None
    ),
    lambda s: (
        "WEBHOOK_PROXY_PROTOCOL: on, but WEBHOOK_TRUSTED_PROXIES names no proxy to take the client from"
        if s.proxy_protocol and not s.trusted_proxies
        else None
    ),
    _same_listener,
    _key_mode,
)


def _log_level(raw: str) -> str:
    level = raw.strip().upper()
    if level not in _LOG_LEVELS:
        raise ValueError(f"{raw!r} is not one of {', '.join(_LOG_LEVELS)}")
    return level


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# gunicorn's names (sync, gthread, gevent...), a class's dotted path, or egg:pkg#name.
_WORKER_CLASS = re.compile(r"(egg:[A-Za-z0-9_.-]+#)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _worker_class(raw: str) -> str:
    if not _WORKER_CLASS.fullmatch(raw):
        raise ValueError(f"{raw!r} is not a gunicorn worker class (gthread, sync, or a dotted path)")
    return raw


@dataclass(frozen=True)
class Process:
    """The variables gunicorn's config and the logging set-up read, checked by the same rules as Settings."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    threads: int = 8
    worker_class: str = "gthread"
    timeout_s: int = 30
    gunicorn_log_level: str = "info"
    log_level: str = "INFO"
    metrics_dir: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Process:
        return cls(**_read(_PROCESS_FROM_ENV, os.environ if env is None else env))


_PROCESS_FROM_ENV: dict[str, tuple[str, Callable[[str], Any]]] = {
    "workers": ("WEB_CONCURRENCY", _at_least(1)),
    "threads": ("GUNICORN_THREADS", _at_least(1)),
    "worker_class": ("GUNICORN_WORKER_CLASS", _worker_class),
    # gunicorn reads 0 as "never": a hung worker would hold its deliveries for good.
    "timeout_s": ("GUNICORN_TIMEOUT", _at_least(1)),
    "gunicorn_log_level": ("GUNICORN_LOG_LEVEL", lambda raw: _log_level(raw).lower()),
    "log_level": ("LOG_LEVEL", _log_level),
    "metrics_dir": ("PROMETHEUS_MULTIPROC_DIR", _text),
}

# Every variable an operator sets, and its rule (docs/configuration.md lists the same).
RULES: dict[str, Callable[[str], Any]] = {
    variable: parse for variable, parse in (*_FROM_ENV.values(), *_PROCESS_FROM_ENV.values())
}


def serving(env: Mapping[str, str] | None = None) -> tuple[Settings, Process]:
    """The settings of a server under gunicorn, checked before anything starts.

    One pooled connection per thread, so a thread never waits for another's:
    WEBHOOK_POOL_MAX_SIZE follows GUNICORN_THREADS unless it is set.
    """
    env = os.environ if env is None else env
    process = Process.from_env(env)
    pooled = {"WEBHOOK_POOL_MAX_SIZE": env.get("WEBHOOK_POOL_MAX_SIZE") or str(process.threads)}
    return Settings.from_env({**env, **pooled}), process
