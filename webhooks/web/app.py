"""The web app gunicorn serves (wsgi.py): Flask for the probes and /admin, webhook deliveries ahead of it."""

from __future__ import annotations

import os

import structlog
from flask import Flask, Response

from webhooks import bootstrap
from webhooks.core import ingest
from webhooks.infra import db, migrate
from webhooks.infra.config import Process, Settings
from webhooks.infra.logs import configure as configure_logging

from . import admin, checkout_return, delivery, metrics, startup

log = structlog.get_logger(__name__)


def create_app(settings: Settings | None = None) -> Flask:
    """The app, assembled by the composition root (webhooks/bootstrap.py) like every other process.

    It only wires: each delivery is answered by webhooks/web/delivery.py, from
    the WSGI environ to its answer, and /metrics by its own listener.
    """
    settings = settings or Settings.from_env()
    configure_logging(Process.from_env().log_level)
    service = bootstrap.build(settings)
    app = Flask(__name__)
    # What Flask's routes may read: the cap read_body reads a delivery's body to.
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes + 1
    app.extensions["webhooks.service"] = service
    app.extensions["webhooks.pool"] = service.pool
    _probes(app, service)
    enabled = service.providers.enabled(settings)
    # The domains' metrics (Registry.metrics) beside the app's own.
    observe = metrics.Metrics(service.pool, settings.front_dir, service.registry.metrics())
    admin.install(app, settings.admin_token, service, enabled, observe.sign_in_failures)
    delivery.install(app, service, observe.delivery)
    checkout_return.install(app, service, observe.checkout_return)
    metrics.install(app, observe, settings)
    startup.announce(settings, service.providers)
    service.publish_settings()
    log.info("app_ready", pid=os.getpid())
    return app


def _probes(app: Flask, service: bootstrap.Service) -> None:
    """/healthz (the process answers) and /readyz (deliveries can be taken)."""
    settings, pool = service.settings, service.pool

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


def _json_response(status: int, body: str) -> Response:
    return Response(body, status=status, mimetype="application/json")


def _error(status: int, error: str, detail: str | None = None) -> Response:
    return _json_response(status, delivery.error_body(error, detail))
