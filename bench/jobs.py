"""CPU per outbox job checked at enqueue: pydantic models or jsonschema-rs (`python -m bench.jobs`).

Every job is checked at enqueue (webhooks/core/jobs.py), so this is added to
each delivery that writes one. The candidates check the same
`order.fulfilled` job, the one a payment's success writes: the kind's model,
as `jobs.check` does it, and jsonschema-rs (the validator used before the
jobs were models, the fastest measured then) compiled once from the schema
published from that model. Printed per job, and as a ratio to encoding that
job as JSON, which enqueue does anyway: all measured in the same run. The
last rows are what a payment's success pays before its one statement: its
stated job built and checked against the two kinds it can become
(orders.success).
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable

import jsonschema_rs

from webhooks.core import jobs
from webhooks.domains.stripe import checkout
from webhooks.domains.stripe.orders import ORDER_FULFILLED, PAYMENT_REVIEW
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples

KIND = ORDER_FULFILLED
JOB = {
    "kind": KIND.name,
    "payment_id": "pi_3PqLmN2eZvKYlo2C1dX9fT0a",
    "account": None,
    "event_id": "evt_1RkG2pNx4KqR2eZv4THa9l9O",
    "event_type": "checkout.session.completed",
    "amount": 3000,
    "currency": "eur",
    "session_id": "cs_test_b1PW03XpdSxYeXUqWtplRj8Huil0hbogJoyEZ33jNZPF2vgWy3HIp7Qg04",
    "client_reference_id": "order_8842",
    "customer": "cus_SdF3kLm9QwErTy",
    "metadata": {"order_id": "8842", "sku": "tea"},
}


def _per_job_us(check: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(check, number=number, repeat=5)) / number * 1e6


def _stated_checks(event, paid, check: Callable[..., None]) -> Callable[[], object]:
    return lambda: [
        check(kind, stated) for stated in [paid.stated(event)] for kind in (ORDER_FULFILLED, PAYMENT_REVIEW)
    ]


def main(number: int = 20_000) -> int:
    compiled = {
        kind: jsonschema_rs.validator_for(jobs.schema(kind)) for kind in (ORDER_FULFILLED, PAYMENT_REVIEW)
    }
    partial = {kind: jsonschema_rs.validator_for({**jobs.schema(kind), "required": []}) for kind in compiled}
    baseline = _per_job_us(lambda: json.dumps(JOB, separators=(",", ":")), number)
    session = samples.payment_events()[0]
    event = stripe_wire.parse(samples.encode(session).decode())
    paid = checkout.payment_success(event)
    candidates = {
        "pydantic model, as webhooks.core.jobs.check": lambda: jobs.check(KIND, JOB),
        "jsonschema-rs (compiled from the schema)": lambda: compiled[KIND].validate(JOB),
        "a Checkout success, all of it": lambda: checkout.payment_success(event),
        "  its stated job checked, pydantic": _stated_checks(
            event, paid, lambda kind, stated: jobs.check(kind, stated, partial=True)
        ),
        "  its stated job checked, jsonschema-rs": _stated_checks(
            event, paid, lambda kind, stated: partial[kind].validate(stated)
        ),
    }
    print(f"{'validator':<46} {'us/job':>8} {'x json.dumps':>13}")
    print(f"{'json.dumps of the job (baseline)':<46} {baseline:>8.2f} {1:>13.2f}")
    for name, check in candidates.items():
        cost = _per_job_us(check, number)
        print(f"{name:<46} {cost:>8.2f} {cost / baseline:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
