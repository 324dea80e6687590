"""`/admin`: the operator's console behind WEBHOOK_ADMIN_TOKEN, on a listener of its own.

Without a configured token it does not exist (404), so a deployment never
exposes it by accident; with one, it answers only on the console's listener
(ADMIN_HOST:ADMIN_PORT, loopback by default) and is a 404 on the public one.
A browser signs in once, POSTing the token (`sign_in.py`: refusals limited
and counted in /metrics), and gets a session cookie: HttpOnly, Secure over
TLS, SameSite=Strict, expiring SESSION_LIFETIME after sign-in. A script
sends the token as a Bearer header instead. No URL ever carries it.

The views are the module's functions on its blueprint, `bp`; `install`
registers it and leaves what they read (the token, the service) in the
app's extensions, where each request finds it.

Pages are GETs that change nothing: the lists, an event (its payload with
personal fields redacted, its ledger row, failures and outbox jobs), the
count a bulk reprocess or requeue would run, and a bulk job's progress.
Every action is a POST, from a signed-in browser with a CSRF token bound to
its session and that action (`csrf.py`), runs the same code as its command
(`events reprocess`, `outbox requeue`), and writes one `admin_action` log
line naming the action and the event or job ids, never a payload. A bulk
reprocess or requeue only starts a job (core/bulk.py) that the worker runs
a batch at a time; its page shows the progress and a cancel.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog
from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.sessions import SecureCookieSessionInterface
from prometheus_client import Counter
from werkzeug.wrappers import Response as ResponseBase

from webhooks import bootstrap
from webhooks.core import bulk, history, outbox
from webhooks.core.redaction import Policy
from webhooks.infra import db
from webhooks.infra.config import parse_instant
from webhooks.web import ADMIN, LISTENER

from . import activity, csrf, sign_in

log = structlog.get_logger(__name__)
# A blueprint, so the templates travel with this module.
bp = Blueprint("admin", __name__, template_folder="templates")


def _style_source() -> str:
    """The pages' one <style> element, as a CSP source: by its hash, so that no other style applies."""
    page = (Path(__file__).parent / "templates" / "base.html").read_text()
    match = re.search(r"<style>(.*?)</style>", page, re.S)
    if match is None:
        raise RuntimeError("base.html has no <style> element")
    return f"'sha256-{base64.b64encode(hashlib.sha256(match[1].encode()).digest()).decode()}'"


# A signed-in browser's session lasts this long from its sign-in, however used.
SESSION_LIFETIME = timedelta(hours=8)
# The session cookie's name: what the session holds is its id, for the CSRF tokens.
_SESSION_KEY = "admin_session"

# On every answer under /admin, Flask's own 404 and 405 included.
_HEADERS = {
    "Cache-Control": "no-store",
    # An event's or a job's id in a URL is nobody else's business.
    "Referrer-Policy": "no-referrer",
    # The answer is what its Content-Type says, never sniffed into something else.
    "X-Content-Type-Options": "nosniff",
    # No frame may hold the page (clickjacking): the old header, and CSP's own.
    "X-Frame-Options": "DENY",
    # Nothing loads or runs: the page is its HTML and its own style, and its
    # forms post back to this origin only.
    "Content-Security-Policy": "; ".join(
        [
            "default-src 'none'",
            f"style-src {_style_source()}",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    ),
}


def _bearer() -> str | None:
    """The token a script sends in its Authorization header, if it sends one."""
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials else None


def _text(body: str, status: int, **headers: str) -> Response:
    return Response(body + "\n", status, mimetype="text/plain", headers=headers)


def _page(template: str, status: int = 200, **context: Any) -> Response:
    return Response(render_template(template, **context), status, mimetype="text/html")


class _Sessions(SecureCookieSessionInterface):
    """Flask's signed session cookie, Secure when the request came over TLS.

    Over TLS the cookie must never travel in the clear; X-Forwarded-Proto is
    the deploy's TLS front saying so. A client that sends it over plain HTTP
    only gets a cookie its own browser will not send back.
    """

    def get_cookie_secure(self, app: Flask) -> bool:
        return request.is_secure or request.headers.get("X-Forwarded-Proto", "") == "https"


def _harden(response: Response) -> Response:
    if request.path == "/admin" or request.path.startswith("/admin/"):
        response.headers.update(_HEADERS)
    return response


def _audit(action: str, **what: Any) -> None:
    """One line per action: what was done to which ids, by whom (the admin token's holder, from where)."""
    log.info("admin_action", action=action, actor="admin_token", client=request.remote_addr, **what)


class BadFilter(ValueError):
    """A bulk reprocess's filter that means nothing (a 400)."""


class _Filter:
    """A bulk reprocess's selection as the forms carry it: provider, type, since (a span or an ISO time)."""

    def __init__(self, values: Any):
        self.provider = values.get("provider") or None
        self.type = values.get("type") or None
        since = values.get("since") or None
        try:
            self.since = parse_instant(since) if since else None
        except ValueError as exc:
            raise BadFilter(f"since: {exc}") from None

    def fields(self) -> dict[str, str]:
        """The selection fixed as it was counted: since as a moment, not a span that moves on."""
        found = {"provider": self.provider, "type": self.type, "since": self.since and self.since.isoformat()}
        return {name: value for name, value in found.items() if value}


class _Find:
    """A search as the find form carries it: an id, status, provider, type, since, and the page's cursor."""

    def __init__(self, values: Any, providers: list[str]):
        self.search = values.get("q", "").strip() or None
        self.status = values.get("status") or None
        self.provider = values.get("provider") or None
        self.type = values.get("type") or None
        self.since_text = values.get("since") or None
        if self.status not in (None, "completed", "failed"):
            raise BadFilter("status: completed or failed")
        if self.provider not in (None, *providers):
            raise BadFilter(f"provider: one of {', '.join(providers)}")
        try:
            self.since = parse_instant(self.since_text) if self.since_text else None
            self.after = history.Cursor.parse(values["after"]) if values.get("after") else None
        except (ValueError, history.BadSearch) as exc:
            raise BadFilter(str(exc)) from None

    def next_page(self, rows: list[history.EventSummary]) -> str | None:
        """The next page's URL, its since fixed to the moment this one counted from."""
        if len(rows) < PAGE_SIZE:
            return None
        fields = {"q": self.search, "status": self.status, "provider": self.provider, "type": self.type}
        fields["since"] = self.since and self.since.isoformat()
        fields["after"] = str(history.Cursor(rows[-1].received_at, rows[-1].event_id))
        return url_for("admin.find", **{name: value for name, value in fields.items() if value})


# The rows a list page shows at most: every page is bounded.
PAGE_SIZE = 50


@dataclass(frozen=True)
class _Console:
    """What the views read from the app they serve: set once by `install`."""

    token: str
    tokens: csrf.Tokens
    service: bootstrap.Service
    # The providers with a secret, and what of a payload is never shown.
    enabled: list[str]
    shown: Policy
    # Refused sign-ins, by reason, for /metrics.
    sign_in_failures: Counter


def install(
    app: Flask, token: str | None, service: bootstrap.Service, enabled: list[str], sign_in_failures: Counter
) -> None:
    """The console, if `token` is set; `enabled` names the providers with a secret."""
    if not token:
        return
    shown = bootstrap.shown(service.settings, service.registry)
    app.extensions["webhooks.admin"] = _Console(
        token, csrf.Tokens(token), service, enabled, shown, sign_in_failures
    )
    # The session cookie is signed with a key only the admin token's holder
    # has: a new token signs every session out.
    app.secret_key = hmac.new(token.encode(), b"webhooks-admin-session", hashlib.sha256).hexdigest()
    app.session_interface = _Sessions()
    app.config.update(
        SESSION_COOKIE_NAME="webhooks_admin",
        SESSION_COOKIE_PATH="/admin",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
        # The expiry counts from sign-in, not from the last page.
        SESSION_REFRESH_EACH_REQUEST=False,
    )
    app.after_request(_harden)
    app.register_blueprint(bp)


def _console() -> _Console:
    console: _Console = current_app.extensions["webhooks.admin"]
    return console


def _render(template: str, status: int = 200, **context: Any) -> Response:
    tokens, signed_in = _console().tokens, session.get(_SESSION_KEY, "")
    return _page(template, status, csrf=lambda action: tokens.issue(signed_in, action), **context)


def _sign_in_page(status: int, refused: str | None = None, **headers: str) -> Response:
    answer = _page("login.html", status, refused=refused)
    answer.headers.update(headers)
    return answer


@bp.before_request
def authorised() -> Response | None:
    if request.environ.get(LISTENER) != ADMIN:
        # The public listener has no console: as if there were none.
        return _text("not found", 404)
    if request.endpoint == "admin.sign_in":
        return None
    console = _console()
    bearer = _bearer()
    if bearer is not None:
        # A script's header, which no other site's form can send: no CSRF token needed.
        if hmac.compare_digest(bearer.encode(), console.token.encode()):
            return None
        return _text("admin token required", 401, **{"WWW-Authenticate": "Bearer"})
    signed_in = session.get(_SESSION_KEY, "")
    if not signed_in:
        return _sign_in_page(401, **{"WWW-Authenticate": "Bearer"})
    if request.method == "POST" and not console.tokens.valid(
        request.form.get("csrf", ""), signed_in, request.path
    ):
        # Signed in, without this session's CSRF token for this action: a forged form, or a stale page.
        log.warning("admin_refused", reason="csrf", path=request.path, client=request.remote_addr)
        return _text("CSRF token missing, wrong or expired: reload the page and try again", 403)
    return None


@bp.route("/admin/sign-in", methods=["GET", "POST"], endpoint="sign_in")
def sign_in_page() -> ResponseBase:
    if request.method == "GET":
        return _sign_in_page(200)
    console = _console()
    with db.connection(console.service.pool.get()) as conn:
        verdict = sign_in.check(conn, request.form.get("token", ""), console.token)
    if verdict is not sign_in.Verdict.SIGNED_IN:
        console.sign_in_failures.labels(verdict.value).inc()
        log.warning("admin_refused", reason=verdict.value, path=request.path, client=request.remote_addr)
        if verdict is sign_in.Verdict.RATE_LIMITED:
            wait = int(sign_in.WINDOW.total_seconds())
            return _sign_in_page(
                429, "too many refused sign-ins: wait a minute", **{"Retry-After": str(wait)}
            )
        return _sign_in_page(401, "wrong token")
    session.clear()
    session[_SESSION_KEY] = secrets.token_urlsafe(16)
    session.permanent = True
    log.info("admin_signed_in", client=request.remote_addr)
    return redirect(url_for("admin.admin"), 303)


@bp.post("/admin/sign-out")
def sign_out() -> ResponseBase:
    session.clear()
    return redirect(url_for("admin.sign_in"), 303)


@bp.get("/admin")
def admin() -> Response:
    console = _console()
    service = console.service
    with db.connection(service.pool.get()) as conn:
        return _render(
            "admin.html",
            providers=activity.recent(conn, service.providers, console.enabled),
            window_hours=int(activity.WINDOW.total_seconds() // 3600),
            events=_shown(history.events(conn, limit=PAGE_SIZE)),
            failures=_shown(history.events(conn, status="failed", limit=20)),
            depth=outbox.depth(conn),
            jobs=outbox.pending(conn, limit=PAGE_SIZE),
            dead_letter_groups=outbox.dead_letter_groups(conn, limit=20),
            bulk_jobs=bulk.recent(conn, limit=10),
            providers_known=service.providers.names(),
            chosen=_Find({}, service.providers.names()),
        )


def _shown(rows: list[history.EventSummary]) -> list[history.EventSummary]:
    """`rows` with their last error's text under the policy (a handler's text can name a customer)."""
    shown = _console().shown
    return [dataclasses.replace(row, last_error=shown.text(row.last_error)) for row in rows]


@bp.get("/admin/events")
def find() -> Response:
    """Events by an id an operator has (the event's, or one in its payload) and filters, a page at a time."""
    service = _console().service
    known = service.providers.names()
    chosen = _Find(request.args, known)
    try:
        with db.connection(service.pool.get()) as conn:
            rows = history.events(
                conn,
                chosen.status,
                chosen.type,
                chosen.since,
                PAGE_SIZE,
                chosen.provider,
                chosen.search,
                chosen.after,
            )
    except history.BadSearch as exc:
        raise BadFilter(str(exc)) from None
    return _render(
        "events.html",
        events=_shown(rows),
        chosen=chosen,
        next_page=chosen.next_page(rows),
        page_size=PAGE_SIZE,
        providers_known=known,
    )


@bp.get("/admin/events/<provider>/<event_id>")
def event(provider: str, event_id: str) -> Response:
    console = _console()
    with db.connection(console.service.pool.get()) as conn:
        detail = history.event(conn, provider, event_id)
        jobs = outbox.pending(conn, None, outbox.Jobs(event=(provider, event_id)))
    if detail is None:
        return _text(f"no event {event_id} of {provider} in the ledger or its failures", 404)
    shown = history.shown(detail, console.shown)
    return _render("event.html", event=shown, payload=history.readable(shown.payload), jobs=jobs)


@bp.post("/admin/events/<provider>/<event_id>/reprocess")
def reprocess(provider: str, event_id: str) -> Response:
    [result] = _console().service.reprocess_each([(provider, event_id)])
    _audit("reprocess", event_ids=[event_id], provider=provider, completed=result.completed)
    return _done("reprocess", [result], 200 if result.completed else 409)


def _done(action: str, results: list[Any], status: int = 200) -> Response:
    """The outcome of a reprocess: its counts, and the first page of its events."""
    completed = sum(result.completed for result in results)
    return _render(
        "done.html",
        status,
        action=action,
        results=results[:PAGE_SIZE],
        completed=completed,
        total=len(results),
    )


@bp.errorhandler(BadFilter)
def bad_filter(exc: BadFilter) -> Response:
    return _text(str(exc), 400)


def _selection(values: Any) -> tuple[_Filter, list[history.EventSummary]]:
    chosen = _Filter(values)
    with db.connection(_console().service.pool.get()) as conn:
        return chosen, history.to_reprocess(conn, chosen.since, chosen.type, chosen.provider)


def _confirm(
    chosen: _Filter, selected: list[history.EventSummary], status: int = 200, **more: Any
) -> Response:
    """The count, and the first page of what it counted: the page stays small whatever the backlog."""
    first_page = _shown(selected[:PAGE_SIZE])
    return _render("confirm.html", status, chosen=chosen, count=len(selected), first_page=first_page, **more)


@bp.get("/admin/reprocess")
def confirm() -> Response:
    chosen, selected = _selection(request.args)
    return _confirm(chosen, selected)


@bp.post("/admin/reprocess")
def reprocess_failed() -> ResponseBase:
    """The confirmed selection becomes a bulk job (core/bulk.py) for the worker; its progress page next."""
    chosen, selected = _selection(request.form)
    if not _still_counted(len(selected)):
        return _confirm(chosen, selected, 409, changed=True)
    return _start(
        bulk.REPROCESS, chosen.fields(), len(selected), events=[(r.provider, r.event_id) for r in selected]
    )


def _still_counted(count: int) -> bool:
    """Whether the confirmed form's count is the selection's now: rows that came or went since it
    was shown are shown again, counted anew, rather than acted on unseen."""
    return str(count) == request.form.get("count")


def _start(action: str, fields: dict[str, str], count: int, **items: Any) -> ResponseBase:
    """A confirmed selection as a bulk job (core/bulk.py) for the worker; its progress page next."""
    with db.connection(_console().service.pool.get()) as conn:
        job_id = bulk.start(conn, action, fields, **items)
    # Before the first item runs: the worker writes the closing line, with the counts.
    _audit(f"bulk_{action}_started", job_id=job_id, count=count, **fields)
    return redirect(url_for("admin.bulk_job", job_id=job_id), 303)


class _DeadLetters:
    """A bulk requeue's selection from the form: dead letters of a kind whose last error said this."""

    def __init__(self, values: Any):
        self.kind = values.get("kind") or None
        # An empty error is a selection of its own: the dead letters whose failure logged no text.
        self.error = values.get("error")
        if self.error is not None and len(self.error) > 2000:
            raise BadFilter("error: at most 2000 characters")

    def jobs(self) -> outbox.Jobs:
        return outbox.Jobs(status=outbox.DEAD, kind=self.kind, error=self.error)

    def fields(self) -> dict[str, str]:
        found = {"kind": self.kind, "error": self.error}
        return {name: value for name, value in found.items() if value is not None}


def _dead_letters(values: Any) -> tuple[_DeadLetters, list[int]]:
    chosen = _DeadLetters(values)
    with db.connection(_console().service.pool.get()) as conn:
        return chosen, outbox.dead_letter_ids(conn, chosen.jobs())


def _confirm_requeue(chosen: _DeadLetters, ids: list[int], status: int = 200, **more: Any) -> Response:
    """The count, and the first page of the dead letters counted."""
    with db.connection(_console().service.pool.get()) as conn:
        first_page = outbox.pending(conn, PAGE_SIZE, outbox.Jobs(status=outbox.DEAD, ids=ids[:PAGE_SIZE]))
    return _render(
        "confirm_requeue.html", status, chosen=chosen, count=len(ids), first_page=first_page, **more
    )


@bp.get("/admin/requeue")
def confirm_requeue() -> Response:
    chosen, ids = _dead_letters(request.args)
    return _confirm_requeue(chosen, ids)


@bp.post("/admin/requeue")
def requeue_dead_letters() -> ResponseBase:
    chosen, ids = _dead_letters(request.form)
    if not _still_counted(len(ids)):
        return _confirm_requeue(chosen, ids, 409, changed=True)
    return _start(bulk.REQUEUE, chosen.fields(), len(ids), dead_letters=ids)


@bp.get("/admin/jobs/<int:job_id>")
def bulk_job(job_id: int) -> Response:
    """A bulk job's progress: its counts, and the first page of the items that came to nothing."""
    with db.connection(_console().service.pool.get()) as conn:
        job = bulk.progress(conn, job_id)
        if job is None:
            return _text(f"no bulk job {job_id}", 404)
        missed = bulk.items(conn, job_id, PAGE_SIZE, failed_only=True)
    return _render("job.html", job=job, missed=missed, page_size=PAGE_SIZE)


@bp.post("/admin/jobs/<int:job_id>/cancel")
def cancel_bulk_job(job_id: int) -> ResponseBase:
    with db.connection(_console().service.pool.get()) as conn:
        job = bulk.cancel(conn, job_id)
    if job is None:
        return _text(f"bulk job {job_id} is not running: nothing cancelled", 409)
    # Its closing line: the batches in flight have committed, so these counts are final.
    bulk.audit("cancelled", job, actor="admin_token", client=request.remote_addr)
    return redirect(url_for("admin.bulk_job", job_id=job_id), 303)


@bp.post("/admin/outbox/<int:job_id>/requeue")
def requeue(job_id: int) -> Response:
    with db.connection(_console().service.pool.get()) as conn:
        requeued = outbox.requeue(conn, outbox.Jobs(status=outbox.DEAD, ids=[job_id]))
    _audit("requeue", job_ids=requeued)
    if not requeued:
        return _text(f"job {job_id} is not a dead letter, or its key is pending again: nothing requeued", 409)
    return _render("done.html", action="requeue", requeued=requeued)
