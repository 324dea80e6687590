-- Early fraud warnings (webhooks/stripe/fraud_warnings.py): the card issuer
-- told Stripe a charge may be fraudulent. Stripe's docs suggest refunding
-- such a charge to avoid a dispute (The Early Fraud Warning object,
-- `actionable`), so one that arrives before the payment's success holds it,
-- as a dispute does (webhooks_hold_reason, webhooks/domains/stripe/orders.sql),
-- and one that arrives after shipping is told to the shop. `actionable` only goes from true to false (once disputed or fully
-- refunded, a warning stays so).
CREATE TABLE fraud_warnings (
    warning_id  text        PRIMARY KEY,
    account     text        NOT NULL DEFAULT '',
    payment_id  text        NOT NULL,
    charge_id   text,
    fraud_type  text,
    actionable  boolean     NOT NULL,
    event_id    text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fraud_warnings_payment_idx ON fraud_warnings (payment_id);

-- Only ever set, like `disputed` before a dispute is won.
ALTER TABLE payments ADD COLUMN fraud_warned boolean NOT NULL DEFAULT false;
