"""The web app gunicorn serves (wsgi.py): turn requests into verified events and answers into responses."""

from __future__ import annotations

import os
import time

import structlog
from flask import Flask, Response
from werkzeug.datastructures import EnvironHeaders
from werkzeug.wsgi import get_content_length

from webhooks import bootstrap
from webhooks.core import ingest
from webhooks.core.events import InvalidEvent, InvalidSignature
from webhooks.infra import db, migrate
from webhooks.infra.config import Settings
from webhooks.infra.logs import configure as configure_logging
from webhooks.providers import Provider

from . import admin, metrics, startup
from .route import WEBHOOK_RULE, JsonAnswer, WebhookRoute, read_body

log = structlog.get_logger(__name__)


def _json_response(status: int, body: str, **headers) -> Response:
    return Response(body, status=status, mimetype="application/json", headers=headers)


def _error_body(error: str, detail: str | None = None) -> str:
    return ingest.json_body(error=error, **({"detail": detail} if detail else {}))


def _error(status: int, error: str, detail: str | None = None) -> Response:
    return _json_response(status, _error_body(error, detail))


def create_app(settings: Settings | None = None) -> Flask:
    """The app, assembled by the composition root (webhooks/bootstrap.py) like every other process."""
    settings = settings or Settings.from_env()
    configure_logging(os.environ.get("LOG_LEVEL", "INFO"))
    service = bootstrap.build(settings)
    pool = service.pool
    app = Flask(__name__)
    # One byte of slack so read_body, not Werkzeug, sees and refuses the overflow.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    app.extensions["webhooks.service"] = service
    app.extensions["webhooks.pool"] = pool
    schema = startup.SchemaGate(pool)

    def serve(environ, provider: Provider) -> JsonAnswer:
        started = time.perf_counter()
        response, event, refusal = _handle(service, schema, environ, provider)
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
        if startup.secret_missing(settings, service.providers):
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
        # A required provider's secret decides readiness (above); the others
        # only say which URLs take deliveries, so one unset secret does not
        # take the whole service out of a load balancer.
        enabled = service.providers.enabled(settings)
        return _json_response(200, ingest.json_body(status="ready", providers=enabled))

    app.wsgi_app = WebhookRoute(app, serve, service.providers)
    admin.install(app, settings.admin_token, pool, service.providers, service.providers.enabled(settings))
    observe = metrics.install(
        app, pool, settings.metrics_port, settings.front_dir, service.registry.metrics()
    )
    startup.announce(settings, service.providers)
    service.publish_settings()
    log.info("app_ready", pid=os.getpid())
    return app


def _refuse(status: int, error: str, detail: str | None = None, event=None):
    """A delivery turned away before the ledger, with its reason for the delivery log."""
    return JsonAnswer(status, _error_body(error, detail), {}), event, {"error": error, "detail": detail}


def _handle(service: bootstrap.Service, schema: startup.SchemaGate, environ, provider: Provider):
    settings = service.settings
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
        # Its one admission (Stripe's mode): a refusal is logged with its
        # reason before any database work.
        settled = provider.admit(event, settings)
    except InvalidSignature as exc:
        return _refuse(provider.invalid_signature_status, "invalid_signature", str(exc))
    except InvalidEvent as exc:
        return _refuse(400, exc.error, str(exc), event)
    refusal = schema.refusal()
    if refusal:
        return _refuse(503, refusal, event=event)
    answer = service.deliver(provider.name, event, settled)
    answer_headers = {"X-Outcome": answer.outcome}
    if answer.replayed:
        answer_headers["Idempotent-Replayed"] = "true"
    return JsonAnswer(answer.status, answer.body, answer_headers), event, {}
