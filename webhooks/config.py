"""Settings read from the environment, once, into an immutable object."""
from __future__ import annotations

import os
from dataclasses import dataclass, field


def _int(env: dict, name: str, default: int) -> int:
    raw = env.get(name)
    return default if raw in (None, "") else int(raw)


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
        )
