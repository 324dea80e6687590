-- What decides whether a payment is an order, what the shop is told to ship,
-- and the refund and dispute lifecycles (webhooks/stripe/orders.py,
-- refunds.py, disputes.py).

-- Order identity, contributed by whichever success event knows it: the
-- Checkout Session (its id, client_reference_id, metadata) and the
-- PaymentIntent (its metadata). `invoice_id` marks an invoice's payment,
-- which is never a one-off order. `held_at`: a success that arrived after a
-- full refund or a dispute, sent for review instead of shipped.
ALTER TABLE payments
    ADD COLUMN checkout_mode      text,
    ADD COLUMN session_id         text,
    ADD COLUMN client_reference_id text,
    ADD COLUMN customer           text,
    ADD COLUMN session_metadata   jsonb,
    ADD COLUMN intent_metadata    jsonb,
    ADD COLUMN invoice_id         text,
    ADD COLUMN held_at            timestamptz,
    -- The charge's own cumulative amount_refunded (charge.refunded), kept
    -- apart from the per-refund rows it is reconciled with.
    ADD COLUMN charge_refunded    bigint NOT NULL DEFAULT 0;
UPDATE payments SET charge_refunded = amount_refunded;

-- A refund's status moves one way (see refunds.py); rows recorded before
-- this migration came from the charge's refund list, where they had succeeded.
ALTER TABLE refunds
    ADD COLUMN status      text NOT NULL DEFAULT 'succeeded'
        CHECK (status IN ('pending', 'requires_action', 'succeeded', 'failed', 'canceled')),
    ADD COLUMN status_rank smallint NOT NULL DEFAULT 1,
    ADD COLUMN failure_reason text,
    ADD COLUMN updated_at  timestamptz NOT NULL DEFAULT now();
ALTER TABLE refunds ALTER COLUMN status DROP DEFAULT, ALTER COLUMN status_rank DROP DEFAULT;

ALTER TABLE disputes
    ADD COLUMN status          text,
    ADD COLUMN status_rank     smallint NOT NULL DEFAULT 0,
    ADD COLUMN due_by          timestamptz,
    ADD COLUMN funds_withdrawn boolean NOT NULL DEFAULT false,
    ADD COLUMN funds_reinstated boolean NOT NULL DEFAULT false,
    ADD COLUMN updated_at      timestamptz NOT NULL DEFAULT now();

-- Fully refunded is a fact of the two amounts, whichever event brought each:
-- a refund can arrive before the payment's amount is known.
ALTER TABLE payments DROP COLUMN refunded;
ALTER TABLE payments ADD COLUMN refunded boolean
    GENERATED ALWAYS AS (coalesce(amount_refunded > 0 AND amount_refunded >= amount, false)) STORED;
