"""The HTTP layer: turn requests into verified events and answers into responses."""
from __future__ import annotations

import os
import threading
import time

import structlog
from flask import Flask, Response
from werkzeug.datastructures import EnvironHeaders
from werkzeug.wsgi import get_content_length

from webhooks.infra import db, migrate
from webhooks.core import ingest, registry
from . import metrics, startup
from webhooks import providers
from webhooks.providers import signature
from webhooks.infra.config import Settings
from webhooks.infra.db import open_pool
from webhooks.core.events import STRIPE, InvalidEvent
from webhooks.infra.logs import configure as configure_logging
from .route import WEBHOOK_RULE, JsonAnswer, WebhookRoute, read_body

log = structlog.get_logger(__name__)
PROVIDER = STRIPE


class _LazyPool:
    """One pool per process, opened on first use, so it is never shared across a fork."""

    def __init__(self, settings: Settings):
        self._settings = settings
        self._lock = threading.Lock()
        self._pool = None
        self._pid = None

    def get(self):
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._pool = open_pool(self._settings)
                    self._pid = os.getpid()
        return self._pool

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.close()


def _json_response(status: int, body: str, **headers) -> Response:
    return Response(body, status=status, mimetype="application/json", headers=headers)


def _error_body(error: str, detail: str | None = None) -> str:
    return ingest.json_body(error=error, **({"detail": detail} if detail else {}))


def _error(status: int, error: str, detail: str | None = None) -> Response:
    return _json_response(status, _error_body(error, detail))


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    configure_logging(os.environ.get("LOG_LEVEL", "INFO"))
    registry.load(settings.handler_modules)
    app = Flask(__name__)
    # One byte of slack so read_body, not Werkzeug, sees and refuses the overflow.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    pool = _LazyPool(settings)
    app.extensions["webhooks.pool"] = pool
    schema = startup.SchemaGate(pool)

    def serve(environ, provider: providers.Provider) -> JsonAnswer:
        started = time.perf_counter()
        response, event, refusal = _handle(settings, pool, schema, environ, provider)
        seconds = time.perf_counter() - started
        outcome = response.headers.get("X-Outcome")
        replayed = response.headers.get("Idempotent-Replayed") == "true"
        log.info(
            "delivery",
            provider=provider.name,
            event_id=event.id if event else None,
            event_type=event.type if event else None,
            outcome=outcome or ("rejected" if refusal else None),
            status=response.status_code,
            replayed=replayed,
            duration_ms=round(seconds * 1000, 2),
            **refusal,
        )
        observe.delivery(provider.name, outcome, response.status_code, replayed, seconds)
        return response

    def unknown_provider(name: str) -> Response:
        # WebhookRoute serves every registered provider before Flask sees it.
        return _error(404, "unknown_provider")

    # Declared so Flask's routing answers the paths' other methods (405,
    # OPTIONS) and unknown providers (404).
    app.add_url_rule(WEBHOOK_RULE, "webhook", unknown_provider, methods=["POST"])

    @app.get("/healthz")
    def healthz() -> Response:
        return _json_response(200, '{"status":"ok"}')

    @app.get("/readyz")
    def readyz() -> Response:
        if not settings.webhook_secrets:
            return _error(503, startup.SECRET_MISSING)
        try:
            # The pool's own wait (WEBHOOK_POOL_TIMEOUT_SECONDS), so a probe
            # answers within it when the database is down.
            with db.connection(pool.get()) as conn:
                current = migrate.is_current(conn)
        except Exception as exc:
            return _error(503, "database_unavailable", type(exc).__name__)
        if not current:
            return _error(503, startup.SCHEMA_NOT_CURRENT)
        # Stripe's secret decides readiness (above); the others only say
        # which URLs take deliveries, so one unset secret does not take the
        # whole service out of a load balancer.
        return _json_response(200, ingest.json_body(status="ready", providers=providers.enabled(settings)))

    app.wsgi_app = WebhookRoute(app, serve)
    observe = metrics.install(app, pool, settings.metrics_port, settings.front_dir)
    startup.announce(settings)
    log.info("app_ready", pid=os.getpid())
    return app


def _refuse(status: int, error: str, detail: str | None = None, event=None):
    """A delivery turned away before the ledger, with its reason for the delivery log."""
    return JsonAnswer(status, _error_body(error, detail), {}), event, {"error": error, "detail": detail}


def _handle(settings: Settings, pool: _LazyPool, schema: startup.SchemaGate, environ,
            provider: providers.Provider):
    secrets = provider.secrets(settings)
    if not secrets:
        return _refuse(503, startup.SECRET_MISSING)
    body = read_body(environ, settings.max_body_bytes)
    if body is None:
        return _refuse(413, "body_too_large")
    length = get_content_length(environ)
    if length is not None and len(body) < length:
        # The client stopped before its declared length: a framing error,
        # whatever the bytes that did arrive say.
        return _refuse(400, "body_incomplete")
    event = None
    headers = EnvironHeaders(environ)
    try:
        text = provider.verify(body, headers, secrets, settings.signature_tolerance_s)
        event = provider.parse(text, headers)
        if provider.admit is not None:
            # ingest.accept checks Stripe's mode too (for backfill and reprocess);
            # a refusal here is logged with its reason before any database work.
            provider.admit(event, settings)
    except signature.InvalidSignature as exc:
        return _refuse(provider.invalid_signature_status, "invalid_signature", str(exc))
    except InvalidEvent as exc:
        return _refuse(400, exc.error, str(exc), event)
    refusal = schema.refusal()
    if refusal:
        return _refuse(503, refusal, event=event)
    answer = ingest.accept(pool.get(), provider.name, event, settings)
    answer_headers = {"X-Outcome": answer.outcome}
    if answer.replayed:
        answer_headers["Idempotent-Replayed"] = "true"
    return JsonAnswer(answer.status, answer.body, answer_headers), event, {}
