-- A payment's success, and the whole delivery of a success event, as
-- functions: the hottest deliveries (a Checkout session's completion, a
-- PaymentIntent's success) then cost one statement instead of six (BEGIN,
-- claim, payment row, fulfilment and job, completion, COMMIT). Each
-- statement cost the web worker about 110 µs of CPU, more than the
-- database spent on it.
--
-- The Python path calls the same functions inside its own transaction
-- (webhooks/service/ledger.py, webhooks/stripe/payments.py, orders.py,
-- scope.py, webhooks/service/outbox.py), so each rule is written once.
-- plpgsql, not SQL functions: plpgsql keeps its plans for the session,
-- PostgreSQL 15 plans a SQL function's statements on every call.

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

-- The ledger claim (ledger.claim). A duplicate blocks here until the claim
-- it meets commits or rolls back, or until lock_timeout.
CREATE FUNCTION webhooks_claim(
    p_provider text, p_event_id text, p_event_type text, p_account text, p_livemode boolean,
    p_created timestamptz, p_payload text, p_status text, p_outcome text,
    p_response_status smallint, p_response_body text
) RETURNS webhooks_claimed LANGUAGE plpgsql AS $$
DECLARE
    claimed webhooks_claimed;
BEGIN
    INSERT INTO webhook_events
        (provider, event_id, event_type, account, livemode, event_created, payload,
         status, outcome, response_status, response_body, completed_at)
    VALUES (p_provider, p_event_id, p_event_type, p_account, p_livemode, p_created, p_payload,
            p_status, p_outcome, p_response_status, p_response_body,
            CASE WHEN p_status = 'completed' THEN now() END)
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING id INTO claimed.ledger_id;
    IF claimed.ledger_id IS NULL THEN
        -- A statement of its own, so a snapshot of its own: it sees the
        -- row the INSERT waited for (none if that was pruned meanwhile).
        SELECT status, response_status, response_body, event_type
        INTO claimed.held_status, claimed.held_response_status, claimed.held_response_body,
             claimed.held_event_type
        FROM webhook_events
        WHERE provider = p_provider AND event_id = p_event_id;
    END IF;
    RETURN claimed;
END $$;

-- The stored answer of a delivery: the JSON the Python side writes with
-- compact separators (ingest.json_body), byte for byte.
CREATE FUNCTION webhooks_answer_body(p_event_id text, p_outcome text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT format('{"event_id":%s,"outcome":%s}', to_json(p_event_id), to_json(p_outcome))
$$;

CREATE FUNCTION webhooks_complete(
    p_ledger_id bigint, p_outcome text, p_response_status smallint, p_response_body text
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhook_events
    SET status = 'completed', outcome = p_outcome, response_status = p_response_status,
        response_body = p_response_body, completed_at = now()
    WHERE id = p_ledger_id;
END $$;

-- An outbox job (outbox.enqueue), as pgqueuer's own enqueue with
-- on_conflict="skip" writes it: the row and its log entry. The entrypoint
-- and header names are outbox.py's ENTRYPOINT, KEY_HEADER and KIND_HEADER.
-- True when a job was written; false when the same key is still pending.
CREATE FUNCTION webhooks_enqueue(p_kind text, p_payload jsonb, p_key text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    job bigint;
BEGIN
    INSERT INTO pgqueuer (priority, entrypoint, payload, execute_after, dedupe_key, headers, status)
    VALUES (0, 'webhooks.outbox', convert_to((jsonb_build_object('kind', p_kind) || p_payload)::text, 'UTF8'),
            now(), p_key, jsonb_build_object('idempotency-key', p_key, 'kind', p_kind), 'queued')
    ON CONFLICT (dedupe_key) WHERE status IN ('queued', 'picked') AND dedupe_key IS NOT NULL
    DO NOTHING
    RETURNING id INTO job;
    IF job IS NULL THEN
        RETURN false;
    END IF;
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    VALUES (job, 'queued', 'webhooks.outbox', 0);
    RETURN true;
END $$;

-- A disagreement between an object's stored account and an event's
-- (scope.py): recorded with the event's effects. Returns the stored
-- account when they disagree, NULL when they agree.
CREATE FUNCTION webhooks_scope_conflict(
    p_object_type text, p_object_id text, p_stored_account text, p_event_account text,
    p_event_id text
) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    IF p_stored_account IS NULL OR p_stored_account = p_event_account THEN
        RETURN NULL;
    END IF;
    INSERT INTO scope_conflicts (object_type, object_id, stored_account, event_account, event_id)
    VALUES (p_object_type, p_object_id, p_stored_account, p_event_account, p_event_id)
    ON CONFLICT (object_type, object_id, event_id) DO NOTHING;
    RETURN p_stored_account;
END $$;

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

-- payments.note: one statement per event. The row is created or locked (a
-- concurrent first event of the same payment waits here), the identity
-- facts added (they do not change, so the first event to state one keeps
-- it), and the status applied only if this event is not older than the one
-- that set the current status. A conflicting row is locked even when the
-- status is not applied, so the lock order is the same for every event.
CREATE FUNCTION webhooks_note_payment(
    p_payment_id text, p_account text, p_status text, p_rank smallint, p_at timestamptz,
    p_amount bigint, p_currency text, p_checkout_mode text, p_session_id text,
    p_client_reference_id text, p_customer text, p_session_metadata jsonb,
    p_intent_metadata jsonb, p_invoice_id text
) RETURNS webhooks_payment LANGUAGE plpgsql AS $$
DECLARE
    noted webhooks_payment;
BEGIN
    INSERT INTO payments AS p
        (payment_id, account, status, status_rank, status_at, amount, currency, checkout_mode,
         session_id, client_reference_id, customer, session_metadata, intent_metadata, invoice_id)
    VALUES (p_payment_id, p_account, p_status, p_rank, p_at, p_amount, p_currency,
            p_checkout_mode, p_session_id, p_client_reference_id, p_customer,
            p_session_metadata, p_intent_metadata, p_invoice_id)
    ON CONFLICT (payment_id) DO UPDATE
    -- The status columns take this event's values or keep the row's, as one:
    -- the sub-select picks the first pair when this event is not older.
    SET (status, status_rank, status_at, amount, currency) = (
            SELECT v.status, v.status_rank, v.status_at, v.amount, v.currency
            FROM (VALUES (true, EXCLUDED.status, EXCLUDED.status_rank, EXCLUDED.status_at,
                          coalesce(EXCLUDED.amount, p.amount), coalesce(EXCLUDED.currency, p.currency)),
                         (false, p.status, p.status_rank, p.status_at, p.amount, p.currency))
                 AS v (newer, status, status_rank, status_at, amount, currency)
            WHERE v.newer = (EXCLUDED.status IS NOT NULL AND (p.status IS NULL
                OR (EXCLUDED.status_at, EXCLUDED.status_rank) >= (p.status_at, p.status_rank)))),
        checkout_mode = coalesce(p.checkout_mode, EXCLUDED.checkout_mode),
        session_id = coalesce(p.session_id, EXCLUDED.session_id),
        client_reference_id = coalesce(p.client_reference_id, EXCLUDED.client_reference_id),
        customer = coalesce(p.customer, EXCLUDED.customer),
        session_metadata = coalesce(p.session_metadata, EXCLUDED.session_metadata),
        intent_metadata = coalesce(p.intent_metadata, EXCLUDED.intent_metadata),
        invoice_id = coalesce(p.invoice_id, EXCLUDED.invoice_id),
        updated_at = now()
    RETURNING p.account, p.checkout_mode, p.session_id, p.client_reference_id, p.customer,
              p.session_metadata, p.intent_metadata, p.invoice_id, p.amount, p.amount_refunded,
              p.disputed, p.held_at,
              (p.status, p.status_at, p.status_rank) IS NOT DISTINCT FROM (p_status, p_at, p_rank),
              EXISTS (SELECT 1 FROM fulfilments f WHERE f.payment_id = p.payment_id)
    INTO noted;
    RETURN noted;
END $$;

-- A job that tells the shop about a payment (orders.py), keyed by the
-- payment. The order's identity is what both success events stated so far;
-- the session's metadata wins over the PaymentIntent's for a key set on both.
CREATE FUNCTION webhooks_payment_job(
    p_kind text, p_payment_id text, p_payment webhooks_payment, p_event_id text,
    p_event_type text, p_amount bigint, p_currency text, p_extra jsonb
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN webhooks_enqueue(p_kind, jsonb_build_object(
        'payment_id', p_payment_id,
        -- The checked attribute, not this event's scope (see scope.py).
        'account', nullif(p_payment.account, ''),
        'event_id', p_event_id,
        'event_type', p_event_type,
        'amount', p_amount,
        'currency', p_currency,
        'session_id', p_payment.session_id,
        'client_reference_id', p_payment.client_reference_id,
        'customer', p_payment.customer,
        'metadata', coalesce(p_payment.intent_metadata, '{}') || coalesce(p_payment.session_metadata, '{}')
    ) || p_extra, p_kind || ':' || p_payment_id);
END $$;

-- orders.succeeded: record the success and ship the payment once, if it is
-- an order and not refunded or disputed; else the outcome word says why.
-- A payment is an order when a Checkout Session in payment mode names it
-- or its PaymentIntent carries the shop's marker (`p_marker_key`), and it
-- pays no invoice; `p_order` is a handler's own decision that it is one.
-- `conflicting_account` is the payment's stored account when this event's
-- scope disagrees with it (recorded in scope_conflicts), else NULL.
CREATE FUNCTION webhooks_payment_succeeded(
    p_event_id text, p_event_type text, p_account text, p_at timestamptz,
    p_payment_id text, p_amount bigint, p_currency text, p_order boolean, p_marker_key text,
    p_checkout_mode text, p_session_id text, p_client_reference_id text, p_customer text,
    p_session_metadata jsonb, p_intent_metadata jsonb, p_invoice_id text,
    OUT outcome text, OUT conflicting_account text
) LANGUAGE plpgsql AS $$
DECLARE
    payment webhooks_payment;
BEGIN
    -- 2: the rank of 'succeeded' in payments._STATUS_RANK.
    payment := webhooks_note_payment(
        p_payment_id, p_account, 'succeeded', 2::smallint, p_at, p_amount, p_currency,
        p_checkout_mode, p_session_id, p_client_reference_id, p_customer,
        p_session_metadata, p_intent_metadata, p_invoice_id);
    conflicting_account := webhooks_scope_conflict(
        'payment', p_payment_id, payment.account, p_account, p_event_id);
    IF payment.held_at IS NOT NULL THEN
        outcome := 'held';
    ELSIF NOT p_order AND coalesce(payment.invoice_id, '') <> '' THEN
        outcome := 'invoice_payment';
    ELSIF NOT p_order AND payment.checkout_mode IS DISTINCT FROM 'payment'
            AND coalesce(payment.intent_metadata ->> p_marker_key, '') = '' THEN
        outcome := 'not_an_order';
    -- Fully refunded against the stored amount or, before one is stored, this
    -- event's: a refund event can arrive before any event that states it.
    ELSIF payment.disputed
            OR coalesce(payment.amount, p_amount) BETWEEN 1 AND payment.amount_refunded THEN
        -- Held only if never shipped: the row lock taken by the note orders
        -- this against a concurrent success event of the same payment.
        UPDATE payments SET held_at = now(), updated_at = now()
        WHERE payment_id = p_payment_id AND held_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM fulfilments f WHERE f.payment_id = p_payment_id);
        IF FOUND THEN
            PERFORM webhooks_payment_job(
                'payment.review', p_payment_id, payment, p_event_id, p_event_type, p_amount,
                p_currency, jsonb_build_object(
                    'reason', CASE WHEN payment.disputed THEN 'disputed' ELSE 'refunded' END));
            outcome := 'held';
        ELSE
            outcome := 'already_fulfilled';  -- shipped before the refund or dispute arrived
        END IF;
    ELSIF payment.fulfilled THEN
        outcome := 'already_fulfilled';
    ELSE
        -- The unique index refuses a second fulfilment: the job is written
        -- only with the row.
        INSERT INTO fulfilments (payment_id, provider, account, event_id, event_type, amount, currency)
        VALUES (p_payment_id, 'stripe', p_account, p_event_id, p_event_type, p_amount, p_currency)
        ON CONFLICT (payment_id) DO NOTHING;
        IF FOUND THEN
            PERFORM webhooks_payment_job(
                'order.fulfilled', p_payment_id, payment, p_event_id, p_event_type, p_amount,
                p_currency, '{}');
            outcome := 'fulfilled';
        ELSE
            outcome := 'already_fulfilled';
        END IF;
    END IF;
END $$;

-- A whole delivery of a payment success event, claim to completion, for
-- ingest's one-statement path. When the event id is taken, only the claim's
-- columns are set (the answer to replay), as on the Python path.
CREATE FUNCTION webhooks_deliver_payment_succeeded(
    p_provider text, p_event_id text, p_event_type text, p_account text, p_livemode boolean,
    p_created timestamptz, p_payload text,
    p_payment_id text, p_amount bigint, p_currency text, p_order boolean, p_marker_key text,
    p_checkout_mode text, p_session_id text, p_client_reference_id text, p_customer text,
    p_session_metadata jsonb, p_intent_metadata jsonb, p_invoice_id text,
    OUT claim webhooks_claimed, OUT outcome text, OUT conflicting_account text
) LANGUAGE plpgsql AS $$
BEGIN
    claim := webhooks_claim(
        p_provider, p_event_id, p_event_type, p_account, p_livemode, p_created, p_payload,
        'processing', NULL, NULL, NULL);
    IF claim.ledger_id IS NULL THEN
        RETURN;
    END IF;
    SELECT s.outcome, s.conflicting_account INTO outcome, conflicting_account
    FROM webhooks_payment_succeeded(
        p_event_id, p_event_type, p_account, p_created, p_payment_id, p_amount, p_currency,
        p_order, p_marker_key, p_checkout_mode, p_session_id, p_client_reference_id, p_customer,
        p_session_metadata, p_intent_metadata, p_invoice_id) AS s;
    PERFORM webhooks_complete(
        claim.ledger_id, outcome, 200::smallint, webhooks_answer_body(p_event_id, outcome));
END $$;
