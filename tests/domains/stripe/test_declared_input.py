"""Declared input: a signed event whose object is not what Stripe sends gets a stored 422, once (issue 32).

Each handled type's sample event is delivered with the values the issue's
fuzzing found: a NUL or a lone surrogate in `currency`, `status`,
`customer` or `charge`, NaN, Infinity or 2^63 in an amount, metadata nested
900 levels deep. Each used to answer 500 on every retry (failing in SQL,
or in the recursion that makes metadata storable). Now: never a 5xx; a
variant in a field the type's handlers read is claimed with a 422 that
names the field and not the value, shows as failed, and its redelivery
gets the same answer replayed, with no handler run, then or later.
"""

from __future__ import annotations

import copy
import json
import time

import pytest

from tests.conftest import post_event, scripted_event
from tests.support.admin import on_console_listener
from tests.support.payment_stories import invoice_payment
from tests.support.rows import count_rows
from tests.support.stories import FIXTURES, fixture, fraud_warning
from webhooks import bootstrap
from webhooks.core import history
from webhooks.core.registry import Registry
from webhooks.domains.stripe import declared
from webhooks.infra.config import Settings
from webhooks.providers.stripe import NAME, parse
from webhooks.traffic import samples

NOW = int(time.time())
# Those of the issue's values that are strings, and the fields it put them in.
TEXTS = {"NUL": "\u0000", "lone surrogate": "\ud800"}
TEXT_FIELDS = ("currency", "status", "customer", "charge")
NUMBERS = {"NaN": float("nan"), "Infinity": float("inf"), "2^63": 2**63}
DEPTH = 900


def _nested(depth: int) -> dict:
    value: dict | str = "deep"
    for _ in range(depth):
        value = {"k": value}
    assert isinstance(value, dict)
    return value


def _sample_objects() -> dict[str, dict]:
    """data.object of a realistic event of each handled type, from the sample files where there is one."""
    files = [fixture(path.stem) for path in FIXTURES.glob("*.json")]
    objects = {evt["type"]: evt["data"]["object"] for evt in files if evt["object"] == "event"}
    subscription = {**objects["customer.subscription.deleted"], "status": "active"}
    charge = objects["charge.refunded"]
    refund = {
        "id": samples.stripe_id("re"),
        "object": "refund",
        "amount": 1000,
        "charge": charge["id"],
        "created": NOW,
        "currency": charge["currency"],
        "payment_intent": charge["payment_intent"],
        "reason": "requested_by_customer",
        "status": "succeeded",
    }
    warning = fraud_warning(charge, NOW)["data"]["object"]
    for action in ("created", "updated", "paused", "resumed", "trial_will_end"):
        objects[f"customer.subscription.{action}"] = subscription
    for action in ("updated", "closed", "funds_withdrawn", "funds_reinstated"):
        objects[f"charge.dispute.{action}"] = objects["charge.dispute.created"]
    for refund_type in ("refund.created", "refund.updated", "refund.failed", "charge.refund.updated"):
        objects[refund_type] = refund
    for action in ("created", "updated"):
        objects[f"radar.early_fraud_warning.{action}"] = warning
    objects["invoice_payment.paid"] = invoice_payment(
        objects["invoice.paid"]["id"], samples.stripe_id("pi"), 1500, NOW, NOW
    )
    return objects


def handled_types(registry: Registry) -> list[str]:
    return sorted(event_type for provider, event_type in registry._handlers if provider == NAME)


OBJECTS = _sample_objects()
HANDLED = handled_types(bootstrap.handlers(Settings()))


def sample(event_type: str) -> dict:
    """A fresh event of `event_type` (a new id) carrying a copy of its sample object."""
    return samples.event(event_type, copy.deepcopy(OBJECTS[event_type]), NOW)


def variants(event_type: str) -> list[tuple[str, str, object]]:
    """(field, name of the value, value) for each of the issue's values in a field of this type's object."""
    obj = OBJECTS[event_type]
    found: list[tuple[str, str, object]] = []
    for field in TEXT_FIELDS:
        if isinstance(obj.get(field), str):
            found += [(field, name, obj[field][:2] + text + obj[field][2:]) for name, text in TEXTS.items()]
    for field in sorted(f for f, v in obj.items() if f.startswith("amount") and isinstance(v, int)):
        found += [(field, name, number) for name, number in NUMBERS.items()]
    return [*found, ("metadata", f"nested {DEPTH} deep", _nested(DEPTH))]


def _counting(registry: Registry) -> dict[str, int]:
    """Wrap every Stripe handler so the test sees each run (the wrapper keeps each type's declaration)."""
    runs = dict.fromkeys(HANDLED, 0)
    for event_type in runs:
        handler = registry.handler(NAME, event_type)

        def counted(conn, event, handler=handler):
            runs[event.type] += 1
            return handler(conn, event)

        registry.add(NAME, [event_type], counted)
    return runs


@pytest.fixture
def counted_client(app):
    registry = app.extensions["webhooks.service"].registry
    return app.test_client(), _counting(registry), registry


def test_every_handled_type_declares_its_object_and_has_a_sample(app):
    registry = app.extensions["webhooks.service"].registry
    assert len(HANDLED) >= 26 and set(HANDLED) <= set(handled_types(registry))
    assert [t for t in HANDLED if registry.reads(NAME, t) is None] == []
    assert sorted(OBJECTS.keys() & set(HANDLED)) == HANDLED
    for event_type in HANDLED:  # the samples are what Stripe sends
        assert declared.problems(registry.reads(NAME, event_type), OBJECTS[event_type]) == [], event_type


@pytest.mark.parametrize("event_type", HANDLED)
def test_the_issues_values_never_get_a_5xx_and_each_answer_is_stored_once(counted_client, db, event_type):
    client, runs, registry = counted_client
    shape = registry.reads(NAME, event_type)
    for field, name, value in variants(event_type):
        evt = sample(event_type)
        evt["data"]["object"][field] = value
        body = json.dumps(evt).encode()
        before = runs[event_type]
        first, again = post_event(client, body), post_event(client, body)
        what = (event_type, field, name)
        assert first.status_code < 500 and again.status_code < 500, (what, first.get_json())
        assert (again.status_code, again.data) == (first.status_code, first.data), what
        assert again.headers["Idempotent-Replayed"] == "true", what
        if field not in shape.model_fields:  # a field no handler of the type reads: applied once
            assert first.status_code == 200 and runs[event_type] - before <= 1, what
            continue
        assert first.status_code == 422, what
        assert runs[event_type] == before, what  # no handler ran, nor on the redelivery
        answer = first.get_json()
        assert (answer["event_id"], answer["error"]) == (evt["id"], "invalid_fields"), what
        assert answer["detail"].startswith(f"data.object.{field}"), (what, answer)
        assert not _quotes(first.data.decode(), value), (what, answer)


def _quotes(text: str, value: object) -> bool:
    """Whether `text` holds `value`, or the escapes a JSON or Python rendering would give it."""
    if isinstance(value, str):
        renderings = {value, json.dumps(value)[1:-1], repr(value)[1:-1]}
        return any(r in text for r in renderings) or "\\u0000" in text or "\\ud800" in text
    if isinstance(value, dict):
        return '"k"' in text or "deep" in text
    return json.dumps(value) in text


def test_a_refused_event_is_stored_recorded_and_shows_as_failed(make_app, db, database_url):
    admin = on_console_listener(make_app(WEBHOOK_ADMIN_TOKEN="t" * 32))
    evt = sample("payment_intent.succeeded")
    evt["data"]["object"]["amount_received"] = float("nan")
    assert post_event(admin, evt).status_code == 422
    row = db.execute(
        "SELECT status, outcome, response_status FROM webhook_events WHERE event_id = %s", [evt["id"]]
    ).fetchone()
    assert row == ("completed", "invalid_fields", 422)
    [(error_class, message)] = db.execute(
        "SELECT error_class, error_message FROM webhook_failures"
    ).fetchall()
    assert error_class == "InvalidFields"
    assert message == "data.object.amount_received: Input should be a valid integer"
    assert count_rows(db, "payments") == 0
    [listed] = history.events(db, event_type="payment_intent.succeeded")
    assert (listed.status, listed.outcome, listed.failures) == ("failed", "invalid_fields", 1)
    assert history.events(db, status="failed")[0].event_id == evt["id"]
    assert history.event(db, NAME, evt["id"]).status == "failed"
    page = admin.get("/admin", headers={"Authorization": f"Bearer {'t' * 32}"}).get_data(as_text=True)
    failures = page.split('<table id="failures">', 1)[1].split("</table>", 1)[0]
    assert evt["id"] in failures and "InvalidFields: data.object.amount_received" in failures


def test_a_handler_that_finds_its_fields_wrong_is_rolled_back_and_answered_422_for_good(client, db):
    evt = scripted_event(refuse_after_write=samples.stripe_id("pi"))
    first, again = post_event(client, evt), post_event(client, evt)
    assert first.status_code == 422 and first.get_json()["error"] == "invalid_fields"
    assert (again.status_code, again.data, again.headers["Idempotent-Replayed"]) == (422, first.data, "true")
    assert count_rows(db, "fulfilments") == 0
    assert count_rows(db, "webhook_failures") == 1  # recorded once


def test_a_refusal_names_each_broken_field_and_the_path_inside_a_list(client, db):
    evt = sample("invoice.paid")
    invoice = evt["data"]["object"]
    invoice["currency"] = "USD"
    invoice["lines"]["data"][0]["period"]["end"] = True
    detail = post_event(client, evt).get_json()["detail"]
    assert detail == (
        "data.object.currency: String should match pattern '^[a-z]{3}$'; "
        "data.object.lines.data[0].period.end: Input should be a valid integer"
    )


def test_a_refusal_never_quotes_a_value_or_a_metadata_key(client, db):
    email = "jenny.rosen@example.com"
    evt = sample("checkout.session.completed")
    session = evt["data"]["object"]
    session.update(customer=email, currency=email, metadata={email: {"nested": email}})
    detail = post_event(client, evt).get_json()["detail"]
    assert email not in detail and "nested" not in detail
    assert detail.count("data.object.") == 3


def test_values_stripe_does_send_are_not_refused(client, db):
    """A status Stripe adds later, a null it documents, expanded ids, Stripe's flat metadata."""
    evt = sample("customer.subscription.updated")
    evt["data"]["object"].update(
        collection_method="some_method_added_later",
        latest_invoice={"id": samples.stripe_id("in"), "object": "invoice"},
        customer={"id": samples.stripe_id("cus"), "object": "customer"},
        cancel_at=None,
    )
    assert post_event(client, evt).get_json()["outcome"] == "subscription_updated"


def test_a_handlers_own_reads_are_all_declared(app, db):
    """No handler reads a field of its event's object that its type's declaration leaves out."""
    registry = app.extensions["webhooks.service"].registry
    service = app.extensions["webhooks.service"]
    reads = _Reads()
    for event_type in HANDLED:
        handler = registry.handler(NAME, event_type)

        def recorded(conn, event, handler=handler):
            reads.on = True
            try:
                return handler(conn, event)
            finally:
                reads.on = False

        registry.add(NAME, [event_type], recorded)
    undeclared = {}
    for event_type in HANDLED:
        event = parse(samples.encode(sample(event_type)).decode())
        event.data["data"]["object"] = _recorded(event.object, reads, "")
        reads.paths.clear()
        assert service.accept(NAME, event).status == 200, event_type
        allowed = _declared_paths(registry.reads(NAME, event_type))
        undeclared[event_type] = sorted(reads.paths - allowed)
    assert undeclared == {t: [] for t in undeclared}


class _Reads:
    def __init__(self) -> None:
        self.on = False
        self.paths: set[str] = set()


class _Recorded(dict):
    """A JSON object that notes each key read while `reads.on`, as a path like `lines.data[].period`."""

    def __init__(self, items: dict, reads: _Reads, path: str) -> None:
        super().__init__(items)
        self._reads, self._path = reads, path

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def _note(self, key) -> None:
        if self._reads.on:
            self._reads.paths.add(self._path + key)


def _recorded(value, reads: _Reads, path: str):
    if isinstance(value, dict):
        return _Recorded({k: _recorded(v, reads, f"{path}{k}.") for k, v in value.items()}, reads, path)
    if isinstance(value, list):
        return [_recorded(item, reads, path.removesuffix(".") + "[].") for item in value]
    return value


def _declared_paths(model: type, prefix: str = "") -> set[str]:
    paths = set()
    for name, field in model.model_fields.items():
        paths.add(prefix + name)
        for inner, suffix in _models_in(field.annotation):
            paths |= _declared_paths(inner, f"{prefix}{name}{suffix}.")
    return paths


def _models_in(annotation) -> list[tuple[type, str]]:
    """The models an annotation holds, with `[]` for those inside a list."""
    if isinstance(annotation, type) and issubclass(annotation, declared.StripeObject):
        return [(annotation, "")]
    inside_list = getattr(annotation, "__origin__", None) is list
    return [
        (model, "[]" if inside_list else suffix)
        for inner in getattr(annotation, "__args__", ())
        for model, suffix in _models_in(inner)
    ]
