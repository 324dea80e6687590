"""The webhook route as plain WSGI: the one path every delivery takes, kept off Flask's machinery."""

from __future__ import annotations

from flask import Flask
from werkzeug.exceptions import InternalServerError, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wsgi import get_content_length, get_input_stream

from webhooks.providers import Provider, Providers

WEBHOOK_PREFIX = "/webhooks/"
WEBHOOK_RULE = WEBHOOK_PREFIX + "<name>"


def read_body(environ, limit: int) -> bytes | None:
    """The raw body, or None when it exceeds `limit`.

    Reads until one byte past the limit: a chunked body has no Content-Length
    to refuse up front, Werkzeug's own cap truncates it silently, and a single
    read() may return only part of any body. The stream is Werkzeug's (what
    Flask's `request.stream` is), one byte over the limit so we, not
    Werkzeug, see and refuse the overflow.
    """
    length = get_content_length(environ)
    if length is not None and length > limit:
        return None
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


class WebhookRoute:
    """WSGI middleware serving `POST /webhooks/<provider>` itself, everything else through Flask.

    Flask's per-request machinery (request context, URL matching, hooks,
    response finalising) is CPU spent on every delivery for one fixed route
    that needs none of it (docs/benchmark.md, "What the code cites").
    The request is read with Werkzeug's own stream helpers and answered with
    the status lines and headers Werkzeug's Response wrote (JsonAnswer), so
    bodies, limits and answers are the ones Flask gave. Flask keeps the route
    declared (see create_app), so its 405 and OPTIONS answers for the path are
    unchanged, and an unknown provider's path falls through to its 404.
    """

    def __init__(self, app: Flask, serve, providers: Providers):
        self._flask_wsgi = app.wsgi_app
        self._app = app
        self.serve = serve
        self._providers = providers

    def __call__(self, environ, start_response):
        provider = self._provider(environ)
        if provider is None:
            return self._flask_wsgi(environ, start_response)
        try:
            response = self.serve(environ, provider)
        except Exception:
            # What Flask does with an exception a view lets escape.
            if self._app.config["PROPAGATE_EXCEPTIONS"] or self._app.testing:
                raise
            path = environ.get("PATH_INFO")
            self._app.logger.error(f"Exception on {path} [POST]", exc_info=True)
            response = InternalServerError().get_response(environ)
        return response(environ, start_response)

    def _provider(self, environ) -> Provider | None:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") != "POST" or not path.startswith(WEBHOOK_PREFIX):
            return None
        return self._providers.get(path[len(WEBHOOK_PREFIX) :])
