-- A payment's success, and the whole delivery of a success event, as
-- functions: the hottest deliveries (a Checkout session's completion, a
-- PaymentIntent's success) then cost one statement instead of six (BEGIN,
-- claim, payment row, fulfilment and job, completion, COMMIT).
--
-- The functions are the rule files' (webhooks/core/ledger.sql, outbox.sql,
-- scope.sql, webhooks/domains/stripe/payments.sql, orders.sql), which every
-- migrate applies after the migrations. The row types they return are
-- here: a type is not replaced in place, so it changes by migration.

-- A claim's result (ledger.Claim): the new row's id, or, when the event id
-- is taken, the row that holds it as it is once the claim's wait is over,
-- so that a redelivery is answered from the same statement.
CREATE TYPE webhooks_claimed AS (
    ledger_id bigint,
    held_status text,
    held_response_status smallint,
    held_response_body text,
    held_event_type text
);

-- What payments.note returns: the row once an event's facts are added.
CREATE TYPE webhooks_payment AS (
    account text, checkout_mode text, session_id text, client_reference_id text,
    customer text, session_metadata jsonb, intent_metadata jsonb, invoice_id text,
    amount bigint, amount_refunded bigint, disputed boolean, held_at timestamptz,
    -- Holding this event's (status, created, rank) is the same as having applied it.
    status_applied boolean,
    -- A fulfilment was committed before this statement began. False does not
    -- mean unshipped: one committed while this statement waited for the row
    -- lock is not seen (the unique index still refuses a second one).
    fulfilled boolean
);
