"""The rules of the settings' values: each turns a variable's text into its value, or raises
ValueError saying what is wrong without quoting a secret (webhooks/infra/config.py names the variable)."""

from __future__ import annotations

import base64
import ipaddress
import math
import re
import urllib.parse
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from psycopg import conninfo


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
