"""A local stand-in for Stripe's API, on 127.0.0.1, for the real stripe client to call.

It serves Stripe-shaped list pages (`object: list`, `data`, `has_more`,
newest first, `starting_after` / `ending_before` cursors, `created[gte]`
style filters, `types[]`) and retrieves, per account (Stripe-Account or
Stripe-Context), from objects a test puts in. A Checkout Session's line
items (`add_session`) are listed in the order they were put in, and a
session retrieved with `expand[]=line_items...` carries "the first handful"
of them (https://docs.stripe.com/api/checkout/sessions/line_items), the rest
paged at its `line_items` URL. Tests can make chosen requests
fail or hang, and read back every request it received.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import pytest

Predicate = Callable[[str, dict], bool]


@dataclass
class Request:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class _Fault:
    when: Predicate
    times: int
    status: int = 500


@dataclass
class _Stall:
    when: Predicate
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    used: bool = False


def _filters_match(obj: dict, query: dict[str, str]) -> bool:
    created = obj.get("created", 0)
    bounds = {"gte": created.__ge__, "gt": created.__gt__, "lte": created.__le__, "lt": created.__lt__}
    for op, compare in bounds.items():
        if f"created[{op}]" in query and not compare(int(query[f"created[{op}]"])):
            return False
    types = [v for k, v in query.items() if k.startswith("types[")]
    if types and obj.get("type") not in types:
        return False
    if "type" in query and obj.get("type") != query["type"]:
        return False
    return "status" not in query or obj.get("status") == query["status"]


class StripeApi:
    # How many line items an expanded session carries (Stripe's "first handful").
    EMBEDDED_LINE_ITEMS = 10

    def __init__(self):
        self.requests: list[Request] = []
        self._objects: dict[tuple[str, str], dict[str, dict]] = {}
        self._faults: list[_Fault] = []
        self._stalls: list[_Stall] = []
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    # What the account holds -------------------------------------------------
    def add(self, collection: str, *objects: dict, account: str = "") -> None:
        """`collection` is the path after /v1/: events, payment_intents, checkout/sessions, ..."""
        with self._lock:
            stored = self._objects.setdefault((account, collection), {})
            for obj in objects:
                stored[obj["id"]] = obj

    def add_session(self, session: dict, line_items: list[dict], account: str = "") -> None:
        """A Checkout Session and its line items, listed in this order at `<session>/line_items`."""
        self.add("checkout/sessions", session, account=account)
        self.add(f"checkout/sessions/{session['id']}/line_items", *line_items, account=account)

    # Faults -----------------------------------------------------------------
    def fail(self, when: Predicate, times: int, status: int = 500) -> None:
        """The next `times` requests matching `when(path, query)` answer `status`."""
        self._faults.append(_Fault(when, times, status))

    def stall(self, when: Predicate) -> _Stall:
        """The first request matching `when` hangs until `.release` is set."""
        stall = _Stall(when)
        self._stalls.append(stall)
        return stall

    def calls(self, path_prefix: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path.startswith(path_prefix)]

    # Serving ----------------------------------------------------------------
    def _answer(self, request: Request) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(request)
            for fault in self._faults:
                if fault.times > 0 and fault.when(request.path, request.query):
                    fault.times -= 1
                    return fault.status, {"error": {"type": "api_error", "message": "stand-in fault"}}
        for stall in self._stalls:
            if not stall.used and stall.when(request.path, request.query):
                stall.used = True
                stall.arrived.set()
                stall.release.wait(60)
        account = request.headers.get("stripe-account") or request.headers.get("stripe-context") or ""
        parts = request.path.removeprefix("/v1/").strip("/")
        with self._lock:
            for (owner, collection), objects in self._objects.items():
                if owner != account:
                    continue
                if parts == collection:
                    return 200, self._page(collection, list(objects.values()), request.query)
                if parts.startswith(collection + "/") and parts[len(collection) + 1 :] in objects:
                    return 200, self._expanded(
                        account, collection, objects[parts[len(collection) + 1 :]], request
                    )
        if "/" in parts.removeprefix("checkout/"):
            return 404, {
                "error": {
                    "type": "invalid_request_error",
                    "code": "resource_missing",
                    "message": f"No such object: '{parts.rsplit('/', 1)[-1]}'",
                }
            }
        return 200, self._page(parts, [], request.query)

    def _expanded(self, account: str, collection: str, obj: dict, request: Request) -> dict:
        """A session asked for with its line items expanded carries their first page (under the lock)."""
        expand = [v for k, v in request.query.items() if k.startswith("expand")]
        if collection != "checkout/sessions" or not any(e.startswith("line_items") for e in expand):
            return obj
        lines = f"{collection}/{obj['id']}/line_items"
        items = list(self._objects.get((account, lines), {}).values())
        return {**obj, "line_items": self._page(lines, items, {"limit": str(self.EMBEDDED_LINE_ITEMS)})}

    @staticmethod
    def _page(collection: str, objects: list[dict], query: dict[str, str]) -> dict:
        ordered = [o for o in objects if _filters_match(o, query)]
        if not collection.endswith("/line_items"):
            ordered.sort(key=lambda o: (o.get("created", 0), o["id"]), reverse=True)
        ids = [o["id"] for o in ordered]
        start, stop = 0, len(ordered)
        if "starting_after" in query:
            start = ids.index(query["starting_after"]) + 1
        limit = int(query.get("limit", 10))
        if "ending_before" in query:
            stop = ids.index(query["ending_before"])
            start = max(0, stop - limit)
        data = ordered[start : min(stop, start + limit)]
        has_more = start + len(data) < stop if "ending_before" not in query else start > 0
        return {"object": "list", "url": f"/v1/{collection}", "has_more": has_more, "data": data}

    def _handler(self):
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, body = api._answer(Request(url.path, query, headers))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler

    def close(self) -> None:
        for stall in self._stalls:
            stall.release.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def stand_in():
    """A fresh stand-in for one test; import it into a test module to use it."""
    api = StripeApi()
    yield api
    api.close()


@pytest.fixture
def stand_in_env(monkeypatch, database_url, stand_in):
    """The service's and the API's settings in os.environ, for commands run in-process."""
    from tests import conftest

    values = {**conftest.service_env(database_url), **api_env(stand_in, STRIPE_API_RETRIES=2)}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def api_env(stand_in: StripeApi, **extra) -> dict[str, str]:
    """The settings that point the real stripe client at the stand-in."""
    return {
        "STRIPE_API_KEY": "rk_test_standin",
        "STRIPE_API_BASE": stand_in.url,
        **{k: str(v) for k, v in extra.items()},
    }
