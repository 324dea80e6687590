"""Settings read from the environment, once, into an immutable object.

Each setting is one declaration: its field, type, rule (webhooks/infra/values.py),
variable and default, and its line in docs/configuration.md as the docstring
below it. The tables there are written from these (`.ci/reference`), and
tests/test_docs.py holds them equal. A value its rule refuses, or settings
that disagree, raise SettingError: one line naming the variable, never a
secret's value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Annotated, Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.json_schema import JsonDict

from .errors import PublicError
from .values import (
    CONNECT_TIMEOUT_S,
    STRIPE_MODES,
    _admin_token,
    _api_key,
    _api_version,
    _at_least,
    _csv,
    _database_url,
    _flag,
    _folder,
    _host,
    _http_url,
    _log_level,
    _metadata_key,
    _modules,
    _networks,
    _port,
    _positive,
    _prefixed_csv,
    _seconds,
    _signing_secrets,
    _standard_secrets,
    _stripe_mode,
    _text,
    _user_name,
    _version_range,
    _worker_class,
    network,
    parse_instant,
    parse_span,
)

# What other modules import from here, the values' rules re-exported among it.
__all__ = [
    "CONNECT_TIMEOUT_S",
    "RULES",
    "STRIPE_LIBRARY_API_VERSION",
    "STRIPE_MODES",
    "Process",
    "SettingError",
    "Settings",
    "network",
    "parse_instant",
    "parse_span",
    "serving",
]


class SettingError(PublicError, ValueError):
    """A variable set to something it cannot be: the message names the variable, never a secret's value."""


# The API version the pinned stripe library (requirements.txt) sends: the
# newest whose shapes the handlers are known to read, the top of the default
# range. tests/domains/stripe/test_api_version.py fails when the installed
# library pins another, until Stripe's changelog up to it is reviewed
# (docs/events.md, "API versions and payload shapes") and this moves.
STRIPE_LIBRARY_API_VERSION = "2026-10-28.endive"


def rule(parse: Callable[[str], Any]) -> BeforeValidator:
    """A variable's text through its rule; a value given as itself (`Settings(port=8080)`) is only typed."""
    return BeforeValidator(lambda value: parse(value) if isinstance(value, str) else value)


def setting(
    variable: str,
    default: Any = None,
    *,
    factory: Callable[[], Any] | None = None,
    shown: str | None = None,
    secret: bool = False,
) -> Any:
    """A field read from `variable`; `shown` is its default as docs/configuration.md words it, when
    the value alone would not say it. A secret never appears in a repr."""
    extra: JsonDict | None = {"shown": shown} if shown else None
    if factory is not None:
        return Field(default_factory=factory, alias=variable, repr=not secret, json_schema_extra=extra)
    return Field(default, alias=variable, repr=not secret, json_schema_extra=extra)


# The rules most settings share, as types.
Count = Annotated[int, rule(_at_least(1))]
Seconds = Annotated[float, rule(_positive)]
Names = Annotated[tuple[str, ...], rule(_csv)]
Flag = Annotated[bool, rule(_flag)]
Span = Annotated[timedelta, rule(parse_span)]
UserName = Annotated[str, rule(_user_name)]
Port = Annotated[int, rule(_port)]
Host = Annotated[str, rule(_host)]


class _FromEnv(BaseModel):
    """Fields read from the environment's variables (their aliases), each through its rule."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, use_attribute_docstrings=True
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        """Each variable set and not empty overrides its field's default; SettingError names a bad one."""
        env = os.environ if env is None else env
        given = {variable: env[variable] for variable in cls.variables() if env.get(variable)}
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise SettingError(_line(exc)) from None

    @classmethod
    def variables(cls) -> list[str]:
        return [info.alias for info in cls.model_fields.values() if info.alias]


def _line(exc: ValidationError) -> str:
    """The first error as `VARIABLE: what is wrong`, in the rule's words: pydantic's would quote the value."""
    error = exc.errors(include_input=False, include_url=False)[0]
    reason = error.get("ctx", {}).get("error") or error["msg"]
    return f"{error['loc'][0]}: {reason}" if error["loc"] else str(reason)


class Settings(_FromEnv):
    """What every process of the service reads; then the rules between variables (`_RELATIONS`)."""

    database_url: Annotated[str | None, rule(_database_url)] = setting(
        "DATABASE_URL", None, shown="unset: an embedded server in `<WEBHOOK_DATA_DIR>/pg`"
    )
    """libpq URL or conninfo; `connect_timeout=2` is added unless it sets one, and
    `target_session_attrs=read-write` when it names several hosts (see
    [failover](failover.md#connecting-one-url-naming-every-server))"""
    data_dir: Annotated[str, rule(_text)] = setting("WEBHOOK_DATA_DIR", ".data")
    """the embedded server's folder; a relative path is taken from the project root, so every command
    finds the same server from any working directory"""
    webhook_secrets: Annotated[tuple[str, ...], rule(_signing_secrets)] = setting(
        "STRIPE_WEBHOOK_SECRET",
        (),
        shown="none (start logs `webhook_secret_missing`; `/readyz` and deliveries 503)",
        secret=True,
    )
    """one or more `whsec_...`, comma-separated (rotation, several endpoints)"""
    standard_webhooks_secrets: Annotated[tuple[str, ...], rule(_standard_secrets)] = setting(
        "STANDARD_WEBHOOKS_SECRET",
        (),
        shown="none (start logs `provider_disabled`; `POST /webhooks/standard` answers 503)",
        secret=True,
    )
    """one or more `whsec_<base64>` secrets, comma-separated (rotation)"""
    github_webhook_secrets: Names = setting(
        "GITHUB_WEBHOOK_SECRET", (), shown="none (as above, for `/webhooks/github`)", secret=True
    )
    """the webhook's secret(s), comma-separated"""
    shopify_webhook_secrets: Names = setting(
        "SHOPIFY_WEBHOOK_SECRET", (), shown="none (as above, for `/webhooks/shopify`)", secret=True
    )
    """the Shopify app's client secret(s), comma-separated (rotation); see [Shopify](providers.md#shopify)"""
    port: Port = setting("PORT", 8000)
    """where the service listens (1 to 65535): nginx under `serve`, gunicorn itself under
    `gunicorn.conf.py` alone (see [Serving](serving.md))"""
    host: Host = setting("HOST", "0.0.0.0")
    """the address for `PORT`: an IP address or a host name"""
    metrics_port: Port = setting("METRICS_PORT", 9464)
    """the scraper's listener, the only one that serves `/metrics`: the front's, on a gunicorn socket of
    its own, a few scrapes at a time; gunicorn's own when it runs alone (see
    [Serving](serving.md#metrics-off-the-public-surface))"""
    metrics_host: Host = setting("METRICS_HOST", "127.0.0.1")
    """the address for `METRICS_PORT`; `0.0.0.0` only where the network keeps the port from the internet"""
    admin_port: Port = setting("ADMIN_PORT", 9465)
    """the operator console's listener, the only one that serves `/admin`: the front's, on a gunicorn
    socket of its own; gunicorn's own when it runs alone (see [Operator
    console](operating.md#operator-console-admin))"""
    admin_host: Host = setting("ADMIN_HOST", "127.0.0.1")
    """the address for `ADMIN_PORT`: loopback, reached by an SSH tunnel, or an address only the deploy's
    own front reaches"""
    front_dir: Annotated[str | None, rule(_folder)] = setting(
        "WEBHOOK_FRONT_DIR", None, shown="unset (`serve` sets it for gunicorn)"
    )
    """the folder holding the Unix sockets gunicorn listens on behind nginx (public and scraper's), and
    the front's count of the requests it refused; unset, gunicorn listens on `HOST:PORT` and
    `METRICS_HOST:METRICS_PORT`"""
    front_connections: Annotated[int, rule(_at_least(16))] = setting("WEBHOOK_FRONT_CONNECTIONS", 8192)
    """connections the front (nginx) holds open, slow ones included (at least 16); lowered to fit the
    open-file limit. Each held body costs at most about 26 KiB of memory (see [the trickle
    flood](reliability.md#a-trickle-flood))"""
    front_connections_per_client: Count = setting("WEBHOOK_FRONT_CONNECTIONS_PER_CLIENT", 512)
    """connections one client may hold once its request head is in (at least 1); more are answered 429.
    Behind `WEBHOOK_TRUSTED_PROXIES`, the client is the one the proxy names"""
    stripe_allowlist: Flag = setting("STRIPE_WEBHOOK_ALLOWLIST", False)
    """`on`: `POST /webhooks/stripe` is admitted only from the addresses Stripe publishes
    (`webhooks/web/allowlists/stripe.txt`); from anywhere else the front answers 403 `source_not_allowed`
    before reading the body (see [allowlists](serving.md#provider-allowlists))"""
    github_allowlist: Flag = setting("GITHUB_WEBHOOK_ALLOWLIST", False)
    """`on`: the same for `/webhooks/github` and GitHub's hook ranges (`github.txt`)"""
    allowlist_dir: Annotated[str | None, rule(_text)] = setting(
        "WEBHOOK_ALLOWLIST_DIR", None, shown="the lists shipped in `webhooks/web/allowlists/`"
    )
    """a folder of your own holding `stripe.txt` and `github.txt`, where `webhooks allowlist refresh`
    writes"""
    trusted_proxies: Annotated[tuple[str, ...], rule(_networks)] = setting("WEBHOOK_TRUSTED_PROXIES", ())
    """the load balancers in front of the service, as addresses or networks, comma-separated: from them,
    the client is the address they pass on, and the per-client limit and the allowlists apply to it;
    anyone else's `X-Forwarded-For` is ignored (see [behind a load
    balancer](serving.md#behind-a-load-balancer))"""
    proxy_protocol: Flag = setting("WEBHOOK_PROXY_PROTOCOL", False)
    """`on`: the public listener takes the PROXY protocol (v1 or v2) on every connection, and the client
    is the one it names when the peer is a trusted proxy; needs `WEBHOOK_TRUSTED_PROXIES`"""
    nginx: Annotated[str, rule(_text)] = setting("WEBHOOK_NGINX", "nginx")
    """the front's binary, looked up on `PATH` and in `/usr/sbin`"""
    service_user: UserName = setting(
        "WEBHOOK_SERVICE_USER", "webhooks", shown="`webhooks` (made by `python -m webhooks install`)"
    )
    """started as root, gunicorn's workers run as this user and group, never root (see [who runs as
    whom](serving.md#who-runs-as-whom))"""
    front_user: UserName = setting(
        "WEBHOOK_FRONT_USER",
        "webhooks-front",
        shown="`webhooks-front` (made by `python -m webhooks install`)",
    )
    """started as root, nginx's workers run as this user, in `WEBHOOK_SERVICE_USER`'s group, the one
    gunicorn's socket is shared with"""
    request_read_timeout_s: Annotated[float, rule(_seconds)] = setting(
        "WEBHOOK_REQUEST_READ_TIMEOUT_SECONDS", 10.0
    )
    """from 0.001 to 3600; the front's timeouts: a request head not in this long after the connection
    opened, a body that stalls this long between two reads, or a client that reads none of its answer this
    long, is cut (logged and counted as 408)"""
    # PostgreSQL reads 0 as "no timeout": never what these bounds are for.
    lock_timeout_ms: Count = setting("WEBHOOK_LOCK_TIMEOUT_MS", 1000)
    """how long a duplicate waits for an in-flight delivery before its 409"""
    statement_timeout_ms: Count = setting("WEBHOOK_STATEMENT_TIMEOUT_MS", 10_000)
    """a statement running longer is cancelled (503)"""
    idle_in_transaction_timeout_ms: Count = setting("WEBHOOK_IDLE_IN_TRANSACTION_TIMEOUT_MS", 15_000)
    """a claim held by a stuck worker is freed after this"""
    max_body_bytes: Count = setting("WEBHOOK_MAX_BODY_BYTES", 512 * 1024)
    """larger bodies get 413 (at least 1)"""
    signature_tolerance_s: Count = setting("WEBHOOK_TOLERANCE_SECONDS", 300)
    """signature age (and future skew) accepted (Stripe, Standard Webhooks; for the latter at most 300,
    the library's own window)"""
    pool_min_size: Count = setting("WEBHOOK_POOL_MIN_SIZE", 1)
    """connections each process's psycopg pool keeps open"""
    pool_max_size: Count = setting(
        "WEBHOOK_POOL_MAX_SIZE", 2, shown="`GUNICORN_THREADS` under gunicorn, `2` elsewhere"
    )
    """the pool's most connections per process: one per thread"""
    pool_timeout_s: Seconds = setting("WEBHOOK_POOL_TIMEOUT_SECONDS", 0.5)
    """how long a request waits for a pooled connection: what a 503 takes when the database is down, and
    what `/readyz` waits"""
    db_dead_peer_s: Seconds = setting("WEBHOOK_DB_DEAD_PEER_SECONDS", 10.0)
    """a database connection whose server fell silent (a partition, a dead host) is given up after about
    this long: libpq `keepalives` and `tcp_user_timeout` derived from it, unless `DATABASE_URL` sets them
    (see [reliability](reliability.md#partitions-a-silent-database))"""
    handler_modules: Annotated[tuple[str, ...], rule(_modules)] = setting("WEBHOOK_HANDLER_MODULES", ())
    """modules imported at start so their handlers register (see [Your own
    handlers](events.md#your-own-handlers))"""
    stripe_mode: Annotated[str, rule(_stripe_mode)] = setting("STRIPE_MODE", "test")
    """`test` or `live`: the only `livemode` acted on; the platform's events of the other mode get 400
    `livemode_mismatch`, connected accounts' are claimed as `ignored_other_mode` (run one service per
    mode)"""
    order_marker_key: Annotated[str, rule(_metadata_key)] = setting("WEBHOOK_ORDER_MARKER_KEY", "order_id")
    """the PaymentIntent metadata key that makes a payment outside Checkout a one-off order (see [Which
    payments ship](events.md#which-payments-ship))"""
    stripe_api_versions: Annotated[tuple[str, str], rule(_version_range)] = setting(
        "STRIPE_API_VERSIONS", ("2019-12-03", STRIPE_LIBRARY_API_VERSION[:10])
    )
    """`OLDEST..NEWEST` (inclusive dates; `2025-03-31.basil` counts as `2025-03-31`): the API versions
    whose payload shapes the handlers know; the default ends at the version the pinned `stripe` library
    sends (see [API versions](events.md#api-versions-and-payload-shapes)). A handled event of a version
    outside it, newer or older, is applied if its object has the declared shape (logged once per
    version, counted in `/metrics`); one of none, or outside it and of another shape, gets 500
    `unsupported_api_version` (or `resync_queued` with `STRIPE_API_KEY`) and is retried by Stripe"""
    outbox_url: Annotated[str | None, rule(_http_url)] = setting(
        "WEBHOOK_OUTBOX_URL", None, shown="none (the worker refuses to start)"
    )
    """where the worker POSTs outbox jobs"""
    outbox_max_attempts: Count = setting("WEBHOOK_OUTBOX_MAX_ATTEMPTS", 8)
    """failed tries before a job is dead-lettered (status `failed`)"""
    outbox_backoff_base_s: Seconds = setting("WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS", 1.0)
    """retry *n* waits between half and all of `min(max, base × 2ⁿ)`"""
    outbox_backoff_max_s: Seconds = setting("WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS", 300.0)
    """the `max` above"""
    outbox_http_timeout_s: Seconds = setting("WEBHOOK_OUTBOX_HTTP_TIMEOUT_SECONDS", 10.0)
    """one delivery's HTTP timeout"""
    outbox_poll_s: Seconds = setting("WEBHOOK_OUTBOX_POLL_SECONDS", 0.1)
    """how often an idle worker looks for new jobs: its wake-up latency (no commit sends a NOTIFY; see
    [the outbox](outbox.md#delivery-is-at-least-once))"""
    outbox_heartbeat_timeout_s: Seconds = setting("WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS", 30.0)
    """a job whose worker stopped heartbeating this long is taken again (see [the
    outbox](outbox.md#delivery-is-at-least-once))"""
    outbox_concurrency: Count = setting("WEBHOOK_OUTBOX_CONCURRENCY", 16)
    """jobs a worker claims per dequeue; at most four times as many are in flight"""
    admin_token: Annotated[str | None, rule(_admin_token)] = setting(
        "WEBHOOK_ADMIN_TOKEN", None, shown="none (no `/admin` console)", secret=True
    )
    """token for the [operator console](operating.md#operator-console-admin)"""
    redact_fields: Names = setting("WEBHOOK_REDACT_FIELDS", ())
    """payload keys (any depth) `prune` redacts and `/admin` shows as `[redacted]` (beside the keys the
    domains declare personal), e.g. `customer_details,email,phone,address,shipping,billing_details`"""
    subscription_grace: Span = setting("WEBHOOK_SUBSCRIPTION_GRACE", timedelta(days=3))
    """how long a `past_due` subscription keeps access after its unpaid period began (span: `3d`, `72h`,
    `90m`, `45s`); see [Subscriptions](subscriptions.md#the-access-rule)"""
    subscription_renewal_margin: Span = setting("WEBHOOK_SUBSCRIPTION_RENEWAL_MARGIN", timedelta(hours=2))
    """how long after the last paid period ends its renewal may still be paid before `paid_through` stops
    granting access"""
    access_sweep_s: Seconds = setting("WEBHOOK_ACCESS_SWEEP_SECONDS", 60.0)
    """how often each outbox worker enqueues `subscription.access_changed` for access that time alone
    ended or began"""
    stripe_api_key: Annotated[str | None, rule(_api_key)] = setting(
        "STRIPE_API_KEY",
        None,
        shown="none (`backfill`, `reconcile`, the thin-event fetch and the fetch of a charge's refunds at "
        "API versions 2022-11-15 to 2024-10-28.acacia refuse: those jobs fail and are retried)",
        secret=True,
    )
    """a restricted key with read access to events, payment intents, checkout sessions, charges, refunds,
    disputes, invoices, subscriptions, and products and prices (an order's line items expand them)"""
    stripe_api_version: Annotated[str, rule(_api_version)] = setting(
        "STRIPE_API_VERSION", STRIPE_LIBRARY_API_VERSION
    )
    """the `Stripe-Version` sent on every call, by default the pinned `stripe` library's: fetched objects
    come in the shapes the handlers read (listed events keep their own `api_version`)"""
    stripe_api_base: Annotated[str, rule(_http_url)] = setting("STRIPE_API_BASE", "https://api.stripe.com")
    """where the API is (tests and staging point it at a stand-in)"""
    stripe_api_timeout_s: Seconds = setting("STRIPE_API_TIMEOUT_SECONDS", 30.0)
    """one API call's timeout"""
    stripe_api_retries: Annotated[int, rule(_at_least(0))] = setting("STRIPE_API_RETRIES", 2)
    """the stripe library's retries (with its backoff) of a 409, 429, 5xx or dropped connection"""
    stripe_connect_accounts: Annotated[
        tuple[str, ...], rule(_prefixed_csv("acct_", what="an account id, acct_..."))
    ] = setting("STRIPE_CONNECT_ACCOUNTS", ())
    """connected accounts `backfill` and `reconcile` also read, with `Stripe-Account`, and the return call
    may name"""
    fulfil_token: Annotated[str | None, rule(_admin_token)] = setting(
        "WEBHOOK_FULFIL_TOKEN", None, shown="none (no return call: its route answers 404)", secret=True
    )
    """the `Bearer` token of the [return call](checkout-return.md) a shop's success page backend makes
    (at least 16 characters); needs `STRIPE_API_KEY`"""
    fulfil_rate_per_minute: Count = setting("WEBHOOK_FULFIL_RATE_PER_MINUTE", 120)
    """return calls one client may make a minute through the front, beyond a burst of as many; more are
    answered 429 (each costs Stripe API calls)"""
    fulfil_stripe_timeout_s: Seconds = setting("WEBHOOK_FULFIL_STRIPE_TIMEOUT_SECONDS", 10.0)
    """how long a return call waits on each of its Stripe API calls (not retried: the caller is answered
    503 with `Retry-After`)"""

    @model_validator(mode="after")
    def _agree(self) -> Self:
        """The rules between variables: a value no delivery could succeed with stops the process."""
        for check in _RELATIONS:
            wrong = check(self)
            if wrong:
                raise ValueError(wrong)
        return self


def _same_listener(s: Settings) -> str | None:
    wildcard = {"0.0.0.0", "::"}
    listeners = [("PORT", s.host, s.port), ("METRICS_PORT", s.metrics_host, s.metrics_port)]
    listeners.append(("ADMIN_PORT", s.admin_host, s.admin_port))
    for index, (name, host, port) in enumerate(listeners):
        for other, other_host, other_port in listeners[:index]:
            hosts = {host, other_host}
            if port == other_port and (len(hosts) == 1 or hosts & wildcard):
                return f"{name}: {port} is {other} too: each listener needs a port of its own"
    return None


def _fulfil_without_key(s: Settings) -> str | None:
    if s.fulfil_token and not s.stripe_api_key:
        return "WEBHOOK_FULFIL_TOKEN: the return call reads the session from Stripe: set STRIPE_API_KEY too"
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
    _fulfil_without_key,
)


def _cores() -> int:
    return os.cpu_count() or 1


class Process(_FromEnv):
    """The variables gunicorn's config and the logging set-up read, checked by the same rules as Settings."""

    workers: Count = setting("WEB_CONCURRENCY", factory=_cores, shown="number of cores")
    """gunicorn worker processes (see [Serving](serving.md))"""
    threads: Count = setting("GUNICORN_THREADS", 8)
    """threads per worker; the pool's size follows it unless `WEBHOOK_POOL_MAX_SIZE` is set"""
    worker_class: Annotated[str, rule(_worker_class)] = setting("GUNICORN_WORKER_CLASS", "gthread")
    """gunicorn's worker class (the benchmark tries others)"""
    # gunicorn reads 0 as "never": a hung worker would hold its deliveries for good.
    timeout_s: Count = setting("GUNICORN_TIMEOUT", 30)
    """gunicorn's worker timeout, in seconds"""
    gunicorn_log_level: Annotated[str, rule(lambda raw: _log_level(raw).lower())] = setting(
        "GUNICORN_LOG_LEVEL", "info"
    )
    """the level of gunicorn's own log lines"""
    log_level: Annotated[str, rule(_log_level)] = setting("LOG_LEVEL", "INFO")
    """structlog JSON lines on stdout, one `delivery` line per request"""
    metrics_dir: Annotated[str | None, rule(_text)] = setting(
        "PROMETHEUS_MULTIPROC_DIR", None, shown="a temporary folder per gunicorn start"
    )
    """where gunicorn workers share their metrics; one you set must be writable by `WEBHOOK_SERVICE_USER`
    (checked as that user before serving)"""


# Every variable an operator sets, and its rule (docs/configuration.md lists the same).
RULES: dict[str, Callable[..., Any]] = {
    info.alias: validator.func
    for model in (Settings, Process)
    for info in model.model_fields.values()
    for validator in info.metadata
    if info.alias and isinstance(validator, BeforeValidator)
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


def _default(info: Any) -> str:
    """A setting's default as the table shows it."""
    shown = (info.json_schema_extra or {}).get("shown")
    value = info.get_default(call_default_factory=True)
    if shown:
        return str(shown)
    if value in (None, ()):
        return "none"
    if isinstance(value, bool):
        return "`on`" if value else "`off`"
    if isinstance(value, timedelta):
        return f"`{_span(value)}`"
    if isinstance(value, tuple):
        return f"`{'..'.join(value)}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _span(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(model: type[_FromEnv]) -> str:
    """The Markdown table docs/configuration.md shows for `model`: a row per setting, as declared."""
    rows = [
        f"| `{info.alias}` | {_default(info)} | {' '.join((info.description or '').split())} |"
        for info in model.model_fields.values()
    ]
    return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])


# docs/configuration.md's sections, and the settings each one's table lists.
SECTIONS: dict[str, type[_FromEnv]] = {"Settings": Settings, "Read by the processes themselves": Process}


def with_tables(page: str) -> str:
    """docs/configuration.md with each section's table written from the declarations above."""
    for section, model in SECTIONS.items():
        head, found, rest = page.partition(f"\n## {section}\n")
        if not found:
            raise ValueError(f"no section '## {section}'")
        start = rest.index("\n| variable |") + 1
        end = rest.find("\n\n", start)
        page = head + found + rest[:start] + table(model) + (rest[end:] if end >= 0 else "\n")
    return page
