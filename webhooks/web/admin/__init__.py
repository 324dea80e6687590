"""`GET /admin`: a read-only operator page behind WEBHOOK_ADMIN_TOKEN.

Without a configured token the page does not exist (404), so a deployment
never exposes it by accident. The token is accepted as a Bearer header or,
for a browser, as `?token=`.
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Flask, Response, render_template, request

from webhooks.core import history, outbox
from webhooks.infra import db
from webhooks.providers import Providers

from . import activity

_HEADERS = {
    "Cache-Control": "no-store",
    # The token can be in the URL: never send it on in a Referer.
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
}


def _presented_token() -> str:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials:
        return credentials.strip()
    return request.args.get("token", "")


def install(app: Flask, token: str | None, pool, providers: Providers, enabled: list[str]) -> None:
    """The page, if `token` is set; `enabled` names the providers with a secret."""
    if not token:
        return
    # A blueprint, so the page's template travels with this module.
    page = Blueprint("admin", __name__, template_folder="templates")

    @page.get("/admin")
    def admin() -> Response:
        if not hmac.compare_digest(_presented_token().encode(), token.encode()):
            return Response(
                "admin token required\n", 401, mimetype="text/plain", headers={"WWW-Authenticate": "Bearer"}
            )
        with db.connection(pool.get()) as conn:
            html = render_template(
                "admin.html",
                providers=activity.recent(conn, providers, enabled),
                window_hours=int(activity.WINDOW.total_seconds() // 3600),
                events=history.events(conn, limit=50),
                failures=history.events(conn, status="failed", limit=20),
                depth=outbox.depth(conn),
                jobs=outbox.pending(conn, limit=50),
            )
        return Response(html, mimetype="text/html", headers=_HEADERS)

    app.register_blueprint(page)
