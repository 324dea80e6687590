-- What a Checkout Session's order bought, as `order.fulfilled` carries it
-- (webhooks/domains/stripe/line_items.py): read from Stripe's API once, by
-- the customer's return or by the worker, never inside a claim's
-- transaction, and kept here so that a retried job does not read it again.
CREATE TABLE checkout_line_items (
    session_id  text        NOT NULL,
    account     text        NOT NULL DEFAULT '',
    items       jsonb       NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, account)
);
