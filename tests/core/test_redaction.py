"""What an operator is shown of a payload: one policy (webhooks/core/redaction.py), pages to logs."""

from __future__ import annotations

import json

import pytest

from webhooks.core.redaction import REDACTED, Policy
from webhooks.infra import personal

POLICY = Policy(frozenset({"email", "phone", "address"}))


@pytest.mark.parametrize(
    "text, left",
    [
        ("Ship to 12 Main Street, Springfield", "Ship to [redacted], Springfield"),
        ("221B Baker Street", REDACTED),
        ("call +1 415-555-2671 today", "call [redacted] today"),
        ("call (212) 555 0199", "call [redacted]"),
        ("UK office +44 20 7946 0958", "UK office [redacted]"),
        ("write to jane.doe+shop@mail.example.co.uk", "write to [redacted]"),
    ],
)
def test_emails_phone_numbers_and_street_addresses_are_found_in_free_text(text, left):
    assert personal.scrub(text) == left


@pytest.mark.parametrize(
    "text",
    [
        "pi_3PZcV2eZvKYlo2C0x7Yq",
        "payment_intent.succeeded",
        "Order #1234 for 2 items",
        "amount 12000 at 1700000000",
        "2026-12-05T22:20:57Z",
        "sku 100-200 qty 3",
    ],
)
def test_ids_amounts_dates_and_words_are_left_alone(text):
    assert personal.scrub(text) == text


def test_card_details_personal_keys_and_free_text_are_hidden_at_any_depth():
    # A charge as Stripe sends it (https://docs.stripe.com/api/charges/object): the card's
    # identifying fields under payment_method_details.card; metadata and description free text.
    charge = {
        "id": "ch_3PZcV2eZvKYlo2C0x7Yq",
        "amount": 4200,
        "description": "Gift for Ann, deliver to 9 Elm Road; ring 415-555-2671",
        "receipt_email": "ann@example.com",
        "billing_details": {
            "email": "ann@example.com",
            "phone": "+14155552671",
            "address": {"line1": "9 Elm"},
        },
        "metadata": {"note": "contact ann@example.com", "order_ref": "ord_77"},
        "payment_method_details": {
            "card": {
                "brand": "visa",
                "last4": "4242",
                "fingerprint": "Xt5EWLLDS7FJjR1c",
                "exp_month": 8,
                "exp_year": 2030,
                "wallet": {"dynamic_last4": "1234"},
            }
        },
    }
    shown = json.loads(POLICY.payload(json.dumps(charge)))
    card = shown["payment_method_details"]["card"]
    assert [card[k] for k in ("last4", "fingerprint", "exp_month", "exp_year")] == [REDACTED] * 4
    assert card["wallet"]["dynamic_last4"] == REDACTED and card["brand"] == "visa"
    assert shown["description"] == "Gift for Ann, deliver to [redacted]; ring [redacted]"
    assert shown["metadata"] == {"note": "contact [redacted]", "order_ref": "ord_77"}
    assert shown["receipt_email"] == "[redacted]"  # free text: an email wherever it is
    assert shown["billing_details"]["email"] == REDACTED and shown["billing_details"]["address"] == REDACTED
    assert (shown["id"], shown["amount"]) == (charge["id"], 4200)


def test_text_that_is_not_json_is_scrubbed_as_text():
    assert POLICY.payload("not json: ann@example.com") == "not json: [redacted]"
    assert POLICY.payload(None) is None
