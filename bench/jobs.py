"""CPU per outbox job checked against its schema, for each maintained validator (`python -m bench.jobs`).

Every job is checked at enqueue (webhooks/core/jobs.py), so this is added to
each delivery that writes one. The candidates each compile the schema once
and then check the same `order.fulfilled` job, the one a payment's success
writes. Printed per job, and as a ratio to encoding that job as JSON, which
enqueue does anyway: both measured in the same run. The last row is what a
payment's success pays before its one statement: its stated job built and
checked against the two kinds it can become (orders.success).
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable

import fastjsonschema
import jsonschema

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


def main(number: int = 20_000) -> int:
    schema = jobs.schema(KIND)
    draft = jsonschema.Draft202012Validator(schema)
    compiled = fastjsonschema.compile(schema)
    baseline = _per_job_us(lambda: json.dumps(JOB, separators=(",", ":")), number)
    candidates = {
        "jsonschema (cached Draft202012Validator)": lambda: draft.validate(JOB),
        "fastjsonschema (compiled; drafts 4-7 only)": lambda: compiled(JOB),
        "jsonschema-rs, as webhooks.core.jobs.check": lambda: jobs.check(KIND, JOB),
    }
    print(f"{'validator':<46} {'us/job':>8} {'x json.dumps':>13}")
    print(f"{'json.dumps of the job (baseline)':<46} {baseline:>8.2f} {1:>13.2f}")
    session = samples.payment_events()[0]
    event = stripe_wire.parse(samples.encode(session).decode())
    paid = checkout.payment_success(event)
    candidates["a Checkout success, all of it"] = lambda: checkout.payment_success(event)
    candidates["  of which its stated job, built and checked"] = lambda: [
        jobs.check(kind, stated, partial=True)
        for stated in [paid.stated(event)]
        for kind in (ORDER_FULFILLED, PAYMENT_REVIEW)
    ]
    for name, check in candidates.items():
        cost = _per_job_us(check, number)
        print(f"{name:<46} {cost:>8.2f} {cost / baseline:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
