"""The comparison apps, served by the same gunicorn config as the service.

`trivial`: the HTTP ceiling, a Flask endpoint that reads the body and answers
200 without verifying or storing anything.

`naive`: the check-then-insert handler from DESIGN.md's failure list, with no
ledger and no unique index: it verifies and parses like the service, then
looks for the payment and inserts it if absent, in one READ COMMITTED
transaction. Concurrent duplicates all see "absent" and all insert.
"""

from __future__ import annotations

from flask import Flask, Response, request

from webhooks.core.events import InvalidEvent
from webhooks.infra.config import Settings
from webhooks.infra.db import open_pool
from webhooks.providers import stripe as stripe_wire
from webhooks.providers.stripe import parse
from webhooks.traffic import samples

NAIVE_TABLE = """
CREATE TABLE naive_fulfilments (
    payment_id   text        NOT NULL,
    event_id     text        NOT NULL,
    fulfilled_at timestamptz NOT NULL DEFAULT now()
)
"""
DOUBLE_FULFILMENTS = "SELECT count(*) - count(DISTINCT payment_id) FROM naive_fulfilments"

_ALREADY = "SELECT 1 FROM naive_fulfilments WHERE payment_id = %s"
_FULFIL = "INSERT INTO naive_fulfilments (payment_id, event_id) VALUES (%s, %s)"
_PAYING_TYPES = ("checkout.session.completed", "payment_intent.succeeded")


def _app() -> Flask:
    app = Flask(__name__)
    app.get("/healthz")(lambda: {"status": "ok"})
    return app


trivial = _app()


@trivial.post("/webhooks/stripe")
def _trivial_webhook() -> Response:
    request.get_data()
    return Response('{"outcome":"ignored"}', status=200, mimetype="application/json")


naive = _app()
_settings = Settings.from_env()
_pool = None


@naive.post("/webhooks/stripe")
def _naive_webhook() -> Response:
    global _pool
    _pool = _pool or open_pool(_settings)  # after the fork, one per worker
    body = request.get_data()
    try:
        stripe_wire.verify(body, request.headers.get("Stripe-Signature"), _settings.webhook_secrets, 300)
        event = parse(body.decode("utf-8"))
    except (stripe_wire.InvalidSignature, InvalidEvent):
        return Response('{"error":"invalid"}', status=400, mimetype="application/json")
    if event.type in _PAYING_TYPES:
        payment_id = samples.payment_id(event.data)
        with _pool.connection() as conn, conn.transaction():
            if conn.execute(_ALREADY, [payment_id]).fetchone() is None:
                conn.execute(_FULFIL, [payment_id, event.id])
    return Response('{"outcome":"done"}', status=200, mimetype="application/json")
