"""`python -m webhooks reconcile --since 7d`: what Stripe says happened against the local tables.

Lists succeeded PaymentIntents, completed Checkout Sessions, refunds,
disputes and paid invoices created in the window (platform and each
configured connected account) and reports, matching by object id:
- missing_locally: at Stripe, no local row (a missed or failed event);
- missing_at_stripe: a local row Stripe answers 404 for;
- state_differs: a local row whose object Stripe says is in another state.
A local row Stripe did not list (created before the window) is looked up
one by one. Exits 1 on any drift so cron can alert. Never writes: the fix
is `backfill` or `events reprocess`. What is listed, where, and which rows
each object stands for is each Stripe object's own (its `LOOKUPS`,
webhooks/domains/stripe/lookups.py).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from webhooks.domains.stripe import api as stripe_api
from webhooks.domains.stripe.lookups import Lookup, Rows
from webhooks.domains.stripe.objects import LOOKUPS
from webhooks.infra.config import Settings
from webhooks.infra.db import connect

from . import durations, progress, table
from . import reconcile_local as local

MISSING_LOCALLY, MISSING_AT_STRIPE, STATE_DIFFERS = "missing_locally", "missing_at_stripe", "state_differs"


@dataclass(frozen=True)
class Drift:
    kind: str
    drift: str
    id: str
    account: str
    detail: str


# Each kind of local row reconcile checks, once, and the objects it lists for them.
_ROWS: dict[str, Rows] = {lookup.rows.kind: lookup.rows for lookup in LOOKUPS if lookup.rows}
_LISTED = [(lookup.rows.kind, lookup.listing) for lookup in LOOKUPS if lookup.rows and lookup.listing]


def stripe_side(api, settings: Settings, since: datetime) -> dict[str, dict[str, tuple[str, dict]]]:
    """kind -> local id -> (account, Stripe object), for every account."""
    expected: dict[str, dict[str, tuple[str, dict]]] = defaultdict(dict)
    window = {"gte": int(since.timestamp())}
    for account in stripe_api.accounts(settings):
        for kind, listing in _LISTED:
            objects = stripe_api.list_all(
                api, listing.path, account=account, created=window, **listing.filters
            )
            for obj in progress.bar(objects, desc=f"listing {listing.path}", unit=" objects"):
                key = listing.local_id(obj)
                if key:
                    expected[kind][key] = (account or "", obj)
    return expected


def _refunded_payment(refund: dict) -> str:
    # The key of the local payment row (see stripe.refunds): the intent, else the charge.
    return str(refund.get("payment_intent") or refund.get("charge") or "")


def _uncovered_refunds(conn, missing: list[str], refunds: dict[str, tuple[str, dict]]) -> list[str]:
    """Refunds with no row whose amount is not in their payment's amount_refunded either."""
    owed: dict[str, int] = defaultdict(int)
    for _, refund in refunds.values():
        owed[_refunded_payment(refund)] += refund.get("amount") or 0
    recorded = local.refunded(conn, list(owed))
    uncovered = []
    for refund_id in missing:
        payment = _refunded_payment(refunds[refund_id][1])
        if recorded.get(payment, 0) < owed[payment]:
            uncovered.append(refund_id)
    return uncovered


def _named_by(kind: str, object_id: str) -> Lookup | None:
    """The object a local row's id names: one of the kind's objects, by its id prefix."""
    return next(
        (
            lookup
            for lookup in LOOKUPS
            if lookup.rows is not None
            and lookup.rows.kind == kind
            and any(object_id.startswith(prefix) for prefix in lookup.prefixes)
        ),
        None,
    )


def _agrees(obj: dict) -> bool:
    """What Stripe says of the object is what its local row records."""
    lookup = next((lookup for lookup in LOOKUPS if lookup.object == obj.get("object")), None)
    return lookup is None or lookup.agrees(obj)


def _look_up(api, kind: str, object_id: str, account: str) -> Drift | None:
    """A local row Stripe did not list: 404, another state, or fine (older than the window)."""
    named = _named_by(kind, object_id)
    if named is None:
        return Drift(kind, MISSING_AT_STRIPE, object_id, account, "not an id Stripe's API can look up")
    try:
        obj = stripe_api.get(api, named.path + object_id, account=account or None)
    except stripe_api.NotFound:
        return Drift(kind, MISSING_AT_STRIPE, object_id, account, "Stripe answers 404")
    if _agrees(obj):
        return None
    state = obj.get("payment_status") or obj.get("status")
    return Drift(kind, STATE_DIFFERS, object_id, account, f"Stripe's {obj.get('object')} is {state}")


def compare(conn, api, expected, since: datetime) -> list[Drift]:
    drifts = []
    for kind, rows in _ROWS.items():
        at_stripe = expected.get(kind, {})
        have = local.present(conn, rows, list(at_stripe))
        missing = [object_id for object_id in at_stripe if object_id not in have]
        if kind == "refund":
            missing = _uncovered_refunds(conn, missing, at_stripe)
        for object_id in missing:
            account, obj = at_stripe[object_id]
            detail = f"{obj.get('object')} {obj['id']} at Stripe, no local row in that state"
            drifts.append(Drift(kind, MISSING_LOCALLY, object_id, account, detail))
        for object_id, account in local.recent(conn, rows, since):
            if object_id not in at_stripe:
                drift = _look_up(api, kind, object_id, account)
                drifts += [drift] if drift else []
    return sorted(drifts, key=lambda d: (d.kind, d.drift, d.id))


def _reconcile(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    try:
        api = stripe_api.client(settings)
        expected = stripe_side(api, settings, args.since)
        with connect(settings) as conn:
            local.read_only(conn)
            drifts = compare(conn, api, expected, args.since)
    except (stripe_api.ApiNotConfigured, stripe_api.ApiFailed) as exc:
        print(f"reconcile: {exc}", file=sys.stderr)
        return 2
    if args.json:
        table.print_json(drifts)
    elif drifts:
        rows = [[d.kind, d.drift, d.id, d.account or "-", d.detail] for d in drifts]
        print(table.render(["kind", "drift", "id", "account", "detail"], rows))
    else:
        print(f"no drift since {args.since.isoformat(timespec='seconds')}")
    return 1 if drifts else 0


def register(commands) -> None:
    reconcile = commands.add_parser(
        "reconcile", help="compare Stripe's payments, refunds, disputes, invoices with ours (read only)"
    )
    reconcile.add_argument(
        "--since", type=durations.instant, required=True, help="a span back from now (7d) or an ISO time"
    )
    table.add_json(reconcile)
    reconcile.set_defaults(func=_reconcile)
