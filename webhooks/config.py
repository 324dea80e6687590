"""Settings read from the environment, once, into an immutable object."""
from __future__ import annotations

import os
from dataclasses import dataclass, field


def _int(env: dict, name: str, default: int) -> int:
    raw = env.get(name)
    return default if raw in (None, "") else int(raw)


def _float(env: dict, name: str, default: float) -> float:
    raw = env.get(name)
    return default if raw in (None, "") else float(raw)


def _csv(raw: str | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in (raw or "").split(",") if s.strip())


STRIPE_MODES = ("test", "live")


def _stripe_mode(env: dict) -> str:
    mode = (env.get("STRIPE_MODE") or "test").strip().lower()
    if mode not in STRIPE_MODES:
        raise ValueError(f"STRIPE_MODE must be one of {', '.join(STRIPE_MODES)}, not {mode!r}")
    return mode


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    webhook_secrets: tuple[str, ...] = field(repr=False)
    port: int = 8000
    # Stripe's own default; a delivery signed longer ago than this is a replay.
    signature_tolerance_s: int = 300
    max_body_bytes: int = 512 * 1024
    # How long a duplicate waits for an in-flight claim before answering 409.
    lock_timeout_ms: int = 1000
    # Bounds on how long a stuck worker can hold a claim.
    statement_timeout_ms: int = 10_000
    idle_in_transaction_timeout_ms: int = 15_000
    pool_min_size: int = 1
    pool_max_size: int = 2
    pool_timeout_s: float = 5.0
    data_dir: str = ".data"
    # Modules imported at start-up so their @fulfilment.handles handlers register.
    handler_modules: tuple[str, ...] = ()
    # Events whose livemode differs are refused: a test payment must never
    # ship a live order, and a live one must not vanish into a test database.
    stripe_mode: str = "test"
    # Outbox worker: where side effects are POSTed and how failures are retried.
    outbox_url: str | None = None
    outbox_max_attempts: int = 8
    outbox_backoff_base_s: float = 1.0
    outbox_backoff_max_s: float = 300.0
    outbox_http_timeout_s: float = 10.0
    # LISTEN/NOTIFY wakes the worker at once; this poll catches a lost notification.
    outbox_poll_s: float = 5.0
    # A job picked by a worker that stopped heartbeating is retaken after this.
    outbox_heartbeat_timeout_s: float = 30.0
    outbox_concurrency: int = 4
    # /admin answers only with this token; unset, the page does not exist.
    admin_token: str | None = field(default=None, repr=False)
    # Payload keys `prune` replaces in stored payloads older than its redaction window.
    redact_fields: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: dict | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        return cls(
            database_url=env.get("DATABASE_URL") or None,
            webhook_secrets=_csv(env.get("STRIPE_WEBHOOK_SECRET")),
            port=_int(env, "PORT", 8000),
            signature_tolerance_s=_int(env, "WEBHOOK_TOLERANCE_SECONDS", 300),
            max_body_bytes=_int(env, "WEBHOOK_MAX_BODY_BYTES", 512 * 1024),
            lock_timeout_ms=_int(env, "WEBHOOK_LOCK_TIMEOUT_MS", 1000),
            statement_timeout_ms=_int(env, "WEBHOOK_STATEMENT_TIMEOUT_MS", 10_000),
            idle_in_transaction_timeout_ms=_int(
                env, "WEBHOOK_IDLE_IN_TRANSACTION_TIMEOUT_MS", 15_000
            ),
            pool_min_size=_int(env, "WEBHOOK_POOL_MIN_SIZE", 1),
            pool_max_size=_int(env, "WEBHOOK_POOL_MAX_SIZE", 2),
            pool_timeout_s=float(env.get("WEBHOOK_POOL_TIMEOUT_SECONDS") or 5.0),
            data_dir=env.get("WEBHOOK_DATA_DIR") or ".data",
            handler_modules=_csv(env.get("WEBHOOK_HANDLER_MODULES")),
            stripe_mode=_stripe_mode(env),
            outbox_url=env.get("WEBHOOK_OUTBOX_URL") or None,
            outbox_max_attempts=_int(env, "WEBHOOK_OUTBOX_MAX_ATTEMPTS", 8),
            outbox_backoff_base_s=_float(env, "WEBHOOK_OUTBOX_BACKOFF_BASE_SECONDS", 1.0),
            outbox_backoff_max_s=_float(env, "WEBHOOK_OUTBOX_BACKOFF_MAX_SECONDS", 300.0),
            outbox_http_timeout_s=_float(env, "WEBHOOK_OUTBOX_HTTP_TIMEOUT_SECONDS", 10.0),
            outbox_poll_s=_float(env, "WEBHOOK_OUTBOX_POLL_SECONDS", 5.0),
            outbox_heartbeat_timeout_s=_float(
                env, "WEBHOOK_OUTBOX_HEARTBEAT_TIMEOUT_SECONDS", 30.0
            ),
            outbox_concurrency=_int(env, "WEBHOOK_OUTBOX_CONCURRENCY", 4),
            admin_token=env.get("WEBHOOK_ADMIN_TOKEN") or None,
            redact_fields=_csv(env.get("WEBHOOK_REDACT_FIELDS")),
        )
