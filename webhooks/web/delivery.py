"""`POST /webhooks/<provider>`: one delivery, from the WSGI environ to its answer.

Read top to bottom, this is what a delivery goes through (docs/getting-started.md,
"How a delivery is handled"):

1. `Webhooks` takes a POST to a provider's path before Flask sees it;
   every other request is Flask's (the probes, /admin, this path's 405,
   OPTIONS and unknown providers' 404).
2. `Webhooks.serve` times the answer, and writes the `delivery` log line
   and the metrics of every delivery, answered or refused.
3. `Webhooks.answer`: the provider's secret, the body (`read_body`, within
   WEBHOOK_MAX_BODY_BYTES), its signature, the event parsed from it, the
   provider's admission and the schema gate, each of which may refuse it
   with nothing written (`refused`); then the service accepts the event
   (the claim, in core/ingest.py), and its Answer is the delivery's.
4. `JsonAnswer` writes that answer to WSGI.

It runs as plain WSGI, ahead of Flask: Flask's per-request machinery
(request context, URL matching, hooks, response finalising) is CPU spent
on every delivery for one fixed route that needs none of it
(docs/benchmark.md, "What the code cites"). The request is read with
Werkzeug's own stream helpers and answered with the status lines and
headers Werkzeug's Response wrote, so bodies, limits and answers are the
ones Flask gave.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog
from flask import Flask, Response
from werkzeug.datastructures import EnvironHeaders
from werkzeug.exceptions import InternalServerError, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wsgi import get_content_length, get_input_stream

from webhooks import bootstrap
from webhooks.core import ingest
from webhooks.core.events import Event, InvalidEvent, InvalidSignature
from webhooks.providers import Headers, Provider

from . import WEBHOOK_PREFIX, startup

log = structlog.get_logger(__name__)

WEBHOOK_RULE = WEBHOOK_PREFIX + "<name>"

# Why a delivery was turned away before the claim ({"error", "detail"}),
# for its log line; empty for a delivery the service accepted.
Refusal = dict[str, str | None]
# Where each answered delivery is counted (metrics.Metrics.delivery): its
# provider, outcome (None: refused), status, whether replayed, and seconds.
Report = Callable[[str, str | None, int, bool, float], None]


def install(app: Flask, service: bootstrap.Service, report: Report) -> None:
    """Serve every provider's path ahead of `app`, each delivery counted by `report`.

    The route stays declared on `app` so that Flask's routing answers the
    paths' other methods (405, OPTIONS) and unknown providers (404).
    """
    app.add_url_rule(WEBHOOK_RULE, "webhook", _unknown_provider, methods=["POST"])
    app.wsgi_app = Webhooks(app, service, report)  # type: ignore[method-assign]


def _unknown_provider(name: str) -> Response:
    # Webhooks serves every registered provider before Flask sees the request.
    return Response(error_body("unknown_provider"), status=404, mimetype="application/json")


class Webhooks:
    """WSGI middleware: each provider's deliveries answered here, everything else by Flask."""

    def __init__(self, app: Flask, service: bootstrap.Service, report: Report):
        self._flask_wsgi = app.wsgi_app
        self._app = app
        self._service = service
        self._settings = service.settings
        self._providers = service.providers
        self._schema = startup.SchemaGate(service.pool)
        self._report = report

    def __call__(self, environ, start_response):
        provider = self._provider(environ)
        if provider is None:
            return self._flask_wsgi(environ, start_response)
        try:
            answer = self.serve(environ, provider)
        except Exception:
            # What Flask does with an exception a view lets escape.
            if self._app.config["PROPAGATE_EXCEPTIONS"] or self._app.testing:
                raise
            path = environ.get("PATH_INFO")
            self._app.logger.error(f"Exception on {path} [POST]", exc_info=True)
            answer = InternalServerError().get_response(environ)
        return answer(environ, start_response)

    def _provider(self, environ) -> Provider | None:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "POST" or not path.startswith(WEBHOOK_PREFIX):
            return None
        return self._providers.get(path[len(WEBHOOK_PREFIX) :])

    def serve(self, environ, provider: Provider) -> JsonAnswer:
        """The delivery's answer, with its `delivery` log line and its metrics."""
        started = time.perf_counter()
        answer, event, refusal = self.answer(environ, provider)
        seconds = time.perf_counter() - started
        outcome = answer.headers.get("X-Outcome")
        replayed = answer.headers.get("Idempotent-Replayed") == "true"
        log.info(
            "delivery",
            provider=provider.name,
            event_id=event.id if event else None,
            event_type=event.type if event else None,
            outcome=outcome or ("rejected" if refusal else None),
            status=answer.status_code,
            replayed=replayed,
            duration_ms=round(seconds * 1000, 2),
            **refusal,
        )
        self._report(provider.name, outcome, answer.status_code, replayed, seconds)
        return answer

    def answer(self, environ, provider: Provider) -> tuple[JsonAnswer, Event | None, Refusal]:
        """The answer, the event if one was parsed, and why it was refused, if it was."""
        settings = self._settings
        secrets = provider.secrets(settings)
        if not secrets:
            return refused(503, startup.SECRET_MISSING)
        body = read_body(environ, settings.max_body_bytes)
        if body is None:
            return refused(413, "body_too_large")
        length = get_content_length(environ)
        if length is not None and len(body) < length:
            # The client stopped before its declared length: a framing error,
            # whatever the bytes that did arrive say.
            return refused(400, "body_incomplete")
        event = None
        # A read-only mapping of the request's headers, in all but werkzeug's type stubs.
        headers: Headers = EnvironHeaders(environ)  # type: ignore[assignment]
        try:
            text = provider.verify(body, headers, secrets, settings.signature_tolerance_s)
            event = provider.parse(text, headers)
            # Its one admission (Stripe's mode): a refusal is logged with its
            # reason before any database work.
            settled = provider.admit(event, settings)
        except InvalidSignature as exc:
            return refused(provider.invalid_signature_status, "invalid_signature", str(exc))
        except InvalidEvent as exc:
            if event is not None:
                # Signed and parsed, then refused by its admission: recorded, never without a trace.
                self._service.refuse(provider.name, event, exc)
            return refused(400, exc.error, str(exc), event)
        refusal = self._schema.refusal()
        if refusal:
            return refused(503, refusal, event=event)
        accepted = self._service.accept(provider.name, event, settled)
        answer_headers = {"X-Outcome": accepted.outcome}
        if accepted.replayed:
            answer_headers["Idempotent-Replayed"] = "true"
        return JsonAnswer(accepted.status, accepted.body, answer_headers), event, {}


def read_body(environ, limit: int) -> bytes | None:
    """The raw body, or None when it exceeds `limit`.

    A body with a Content-Length (every one the front hands on) is one read
    of that many bytes from the server's own input, which reads until it has
    them or the client stops (a short body: the caller refuses it). A chunked
    body has no length to refuse up front, Werkzeug's own cap truncates it
    silently, and a single read() may return only part of it: it is read
    through Werkzeug's stream (what Flask's `request.stream` is) until one
    byte past the limit, so we, not Werkzeug, see and refuse the overflow.
    """
    length = get_content_length(environ)
    if length is not None:
        return None if length > limit else environ["wsgi.input"].read(length)
    chunks, size = [], 0
    try:
        stream = get_input_stream(environ, max_content_length=limit + 1)
        while size <= limit:
            chunk = stream.read(limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except RequestEntityTooLarge:
        return None
    return None if size > limit else b"".join(chunks)


def refused(
    status: int, error: str, detail: str | None = None, event: Event | None = None
) -> tuple[JsonAnswer, Event | None, Refusal]:
    """A delivery turned away before the claim, nothing written, with its reason for the log line."""
    return JsonAnswer(status, error_body(error, detail), {}), event, {"error": error, "detail": detail}


def error_body(error: str, detail: str | None = None) -> str:
    return ingest.json_body(error=error, **({"detail": detail} if detail else {}))


class JsonAnswer:
    """A JSON answer written straight to WSGI, with the status line and headers Werkzeug's Response gave.

    Building and calling a Werkzeug Response (a Headers object, mimetype
    and charset handling, header fix-ups for cases a JSON answer never has)
    cost more of a delivery's CPU than anything it adds to a JSON answer
    (docs/benchmark.md, "Webhook answers written straight to WSGI").
    """

    __slots__ = ("status_code", "body", "headers")

    def __init__(self, status_code: int, body: str, headers: dict[str, str]):
        self.status_code, self.body, self.headers = status_code, body, headers

    def __call__(self, environ, start_response):
        data = self.body.encode()
        start_response(
            f"{self.status_code} {HTTP_STATUS_CODES[self.status_code].upper()}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *self.headers.items()],
        )
        return [data]
