-- The state of each payment (keyed like fulfilments: payment intent id, or
-- the charge/session id when there is none). Events arrive in any order, so
-- each independently changing part carries the `created` of the event that
-- set it, and an update applies only if its event is not older:
--   status           <- checkout / payment_intent events, ordered by (status_at, status_rank)
--   amount_refunded  <- charge.refunded, ordered by (refund_at, amount_refunded)
--   disputed         <- charge.dispute.created, only ever set
-- A row can be created by a refund or dispute that arrives before any
-- payment event; status stays NULL until one does.
CREATE TABLE payments (
    payment_id      text        NOT NULL,
    account         text        NOT NULL DEFAULT '',
    status          text        CHECK (status IN ('awaiting_payment', 'failed', 'succeeded')),
    -- Tie-break between events of the same second: the later stage wins.
    status_rank     smallint,
    status_at       timestamptz,
    amount          bigint,
    currency        text,
    amount_refunded bigint      NOT NULL DEFAULT 0,
    refunded        boolean     NOT NULL DEFAULT false,
    refund_at       timestamptz,
    disputed        boolean     NOT NULL DEFAULT false,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (payment_id, account)
);

-- One row per refund id, when Stripe names the refunds (the charge's
-- `refunds` list is only sent when expanded or on old API versions).
CREATE TABLE refunds (
    refund_id  text        NOT NULL,
    account    text        NOT NULL DEFAULT '',
    payment_id text        NOT NULL,
    charge_id  text,
    amount     bigint,
    currency   text,
    event_id   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (refund_id, account)
);
CREATE INDEX refunds_payment_idx ON refunds (payment_id, account);

CREATE TABLE disputes (
    dispute_id text        NOT NULL,
    account    text        NOT NULL DEFAULT '',
    payment_id text        NOT NULL,
    charge_id  text,
    amount     bigint,
    currency   text,
    reason     text,
    event_id   text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dispute_id, account)
);
CREATE INDEX disputes_payment_idx ON disputes (payment_id, account);
