-- Subscription billing. An invoice's status follows its events in `created`
-- order; a paid invoice is fulfilled once (the service period it pays for);
-- a subscription's paid-through date only grows and its revocation is final,
-- so both are the same whatever order the events arrive in.
CREATE TABLE invoices (
    invoice_id      text        NOT NULL,
    account         text        NOT NULL DEFAULT '',
    subscription_id text,
    status          text        NOT NULL CHECK (status IN ('payment_failed', 'paid')),
    status_rank     smallint    NOT NULL,
    status_at       timestamptz NOT NULL,
    amount_due      bigint,
    amount_paid     bigint,
    currency        text,
    attempt_count   integer,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (invoice_id, account)
);

CREATE TABLE invoice_fulfilments (
    id              bigserial PRIMARY KEY,
    invoice_id      text        NOT NULL,
    account         text        NOT NULL DEFAULT '',
    subscription_id text,
    event_id        text        NOT NULL,
    amount_paid     bigint,
    currency        text,
    period_start    timestamptz,
    period_end      timestamptz,
    fulfilled_at    timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX invoice_fulfilments_invoice_id_key ON invoice_fulfilments (invoice_id, account);

CREATE TABLE subscriptions (
    subscription_id text        NOT NULL,
    account         text        NOT NULL DEFAULT '',
    paid_through    timestamptz,
    revoked_at      timestamptz,
    revoked_reason  text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (subscription_id, account)
);
