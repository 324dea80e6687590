"""`python -m bench.declared_input`: what checking a delivery's declared fields costs, engine by engine.

Every handled Stripe delivery's object is checked against its type's
declared fields before any handler runs (webhooks/domains/stripe/declared.py).
This times that check in CPU per delivery (`time.process_time`, one thread)
for the objects most deliveries carry, a paid Checkout Session and a
succeeded PaymentIntent (webhooks.traffic.samples), with each candidate
engine holding the same rules:

- pydantic: the project's own declarations, called as the service calls them;
- msgspec: the same two objects as msgspec Structs, `msgspec.convert` of the
  parsed body (its JSON decoder cannot be used: it refuses NaN anywhere, and
  a NaN in metadata must still ship);
- JSON Schema: the schemas pydantic derives from the same models, checked by
  `jsonschema` (Python) and `jsonschema_rs` (Rust).

Each is printed beside what every delivery already spends parsing its body
(providers.stripe.parse), measured in the same run. An engine that is not
installed is named and skipped.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Literal

from webhooks.domains.stripe import declared
from webhooks.domains.stripe.checkout import Session
from webhooks.domains.stripe.intents import PaymentIntent
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples
from webhooks.traffic.report import markdown_table

OBJECTS = {"checkout.session": Session, "payment_intent": PaymentIntent}


def _msgspec_structs(msgspec) -> dict[str, type]:
    """The two declarations as msgspec Structs, rule for rule."""
    meta = msgspec.Meta
    Id = Annotated[str, meta(pattern=f"^{declared.ID_PATTERN}$")]
    Amount = Annotated[int, meta(ge=0, le=2**63 - 1)]
    Currency = Annotated[str, meta(pattern="^[a-z]{3}$")]
    Word = Annotated[str, meta(pattern="^[a-z0-9_]{1,64}$")]
    Metadata = dict[str, str | int | float | bool | None]

    session = msgspec.defstruct(
        "Session",
        [
            ("object", Literal["checkout.session"]),
            ("id", Id),
            ("mode", Word),
            ("payment_status", Word),
            ("payment_intent", Id | None, None),
            ("amount_total", Amount | None, None),
            ("currency", Currency | None, None),
            ("customer", Id | None, None),
            ("client_reference_id", str | None, None),
            ("metadata", Metadata | None, None),
        ],
    )
    intent = msgspec.defstruct(
        "PaymentIntent",
        [
            ("object", Literal["payment_intent"]),
            ("id", Id),
            ("status", Word),
            ("amount", Amount),
            ("amount_received", Amount),
            ("currency", Currency),
            ("customer", Id | None, None),
            ("metadata", Metadata | None, None),
            ("invoice", Id | None, None),
        ],
    )
    return {"checkout.session": session, "payment_intent": intent}


def _accepts(check: Callable[[Any], Any], obj: dict) -> bool:
    try:
        return check(obj) is not False
    except Exception:  # noqa: BLE001  (each engine refuses in its own way)
        return False


def engines() -> dict[str, Callable[[str], Callable[[dict], Any]] | None]:
    """Each engine's check of one object kind (False or an exception: refused), None if not installed."""
    found: dict[str, Callable[[str], Callable[[dict], Any]] | None] = {
        "pydantic (the project's)": lambda kind: lambda obj: not declared.problems(OBJECTS[kind], obj),
    }
    try:
        msgspec = importlib.import_module("msgspec")
        structs = _msgspec_structs(msgspec)
        found["msgspec.convert"] = lambda kind: lambda obj: msgspec.convert(obj, structs[kind])
    except ImportError:
        found["msgspec.convert"] = None
    for name, module, build in (
        ("JSON Schema, jsonschema", "jsonschema", lambda m, schema: m.Draft202012Validator(schema).is_valid),
        ("JSON Schema, jsonschema_rs", "jsonschema_rs", lambda m, schema: m.validator_for(schema).is_valid),
    ):
        try:
            engine = importlib.import_module(module)
        except ImportError:
            found[name] = None
            continue
        found[name] = lambda kind, engine=engine, build=build: build(
            engine, OBJECTS[kind].model_json_schema()
        )
    return found


def _cpu_us(work: Callable[[], Any], times: int) -> float:
    start = time.process_time()
    for _ in range(times):
        work()
    return (time.process_time() - start) / times * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.declared_input", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--times", type=int, default=20_000, help="checks per engine per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    session_event, intent_event, _ = samples.payment_events()
    bodies = {
        "checkout.session": samples.encode(session_event),
        "payment_intent": samples.encode(intent_event),
    }
    objects = {kind: json.loads(body)["data"]["object"] for kind, body in bodies.items()}
    candidates = engines()
    rows = []
    for kind, body in bodies.items():
        text = body.decode()
        parse = [_cpu_us(partial(stripe_wire.parse, text), args.times) for _ in range(args.rounds)]
        rows.append([kind, "parse the body (every delivery)", f"{statistics.median(parse):.2f}", "1.00", "-"])
        broken = {
            **objects[kind],
            "amount_received" if kind == "payment_intent" else "amount_total": float("nan"),
        }
        for name, make in candidates.items():
            if make is None:
                rows.append([kind, name, "not installed", "-", "-"])
                continue
            check = make(kind)
            if not _accepts(check, objects[kind]):
                raise SystemExit(f"{name} refuses the sample {kind}: its rules are not the project's")
            spent = [_cpu_us(partial(check, objects[kind]), args.times) for _ in range(args.rounds)]
            median = statistics.median(spent)
            refuses = "yes" if not _accepts(check, broken) else "NO"
            rows.append([kind, name, f"{median:.2f}", f"{median / statistics.median(parse):.2f}", refuses])
    print(
        markdown_table(
            ["object", "engine", "CPU µs per delivery", "× parsing the body", "refuses a NaN amount"], rows
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
