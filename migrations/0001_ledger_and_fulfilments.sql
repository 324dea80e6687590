-- The ledger: one row per provider event, committed only together with the
-- event's effects. The unique key is what serialises duplicate deliveries.
CREATE TABLE webhook_events (
    id              bigserial PRIMARY KEY,
    provider        text        NOT NULL,
    event_id        text        NOT NULL,
    event_type      text        NOT NULL,
    account         text,
    livemode        boolean,
    event_created   timestamptz,
    payload         text        NOT NULL,
    status          text        NOT NULL DEFAULT 'processing'
                    CHECK (status IN ('processing', 'completed')),
    outcome         text,
    response_status smallint,
    -- Stored as text so a replay is byte-identical to the first answer.
    response_body   text,
    received_at     timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    CONSTRAINT webhook_events_provider_event_id_key UNIQUE (provider, event_id)
);
CREATE INDEX webhook_events_received_at_idx ON webhook_events (received_at);
CREATE INDEX webhook_events_type_idx ON webhook_events (event_type, received_at);

-- Failed attempts, written on their own transaction after the claim rolled
-- back, so they survive the rollback that frees the event for a retry.
CREATE TABLE webhook_failures (
    id            bigserial PRIMARY KEY,
    provider      text        NOT NULL,
    event_id      text        NOT NULL,
    event_type    text,
    error_class   text        NOT NULL,
    error_message text,
    payload       text,
    failed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_failures_event_idx ON webhook_failures (provider, event_id);
CREATE INDEX webhook_failures_failed_at_idx ON webhook_failures (failed_at);

-- One row per fulfilled payment. The unique index holds even if the ledger is
-- bypassed or pruned: it is the last word on "fulfilled once".
CREATE TABLE fulfilments (
    id           bigserial PRIMARY KEY,
    payment_id   text        NOT NULL,
    provider     text        NOT NULL,
    account      text,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL,
    amount       bigint,
    currency     text,
    fulfilled_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX fulfilments_payment_id_key ON fulfilments (payment_id);
