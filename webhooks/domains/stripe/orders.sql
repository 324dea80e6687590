-- Which succeeded payments ship (orders.py), in their current definitions:
-- `python -m webhooks migrate` re-applies this file after the numbered
-- migrations. A success event's whole delivery is one of these functions
-- (webhooks_deliver_payment_succeeded), so it costs one statement; the
-- handlers call webhooks_payment_succeeded inside their own transaction,
-- so each rule is written once. The outcome words and job kinds written
-- here are orders.py's and core/outcomes.py's (tests/core/test_sql_rules.py
-- holds them to it).

-- A job that tells the shop about a payment, keyed by the payment. The
-- order's identity is what both success events stated so far; the
-- session's metadata wins over the PaymentIntent's for a key set on both.
CREATE OR REPLACE FUNCTION webhooks_payment_job(
    p_kind text, p_payment_id text, p_payment webhooks_payment, p_event_id text,
    p_event_type text, p_amount bigint, p_currency text, p_extra jsonb
) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN webhooks_enqueue(
        p_kind => p_kind,
        p_payload => jsonb_build_object(
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
        ) || p_extra,
        p_key => p_kind || ':' || p_payment_id);
END $$;

-- Why a succeeded order is held rather than shipped, if it is: a dispute,
-- a full refund, an early fraud warning. It reads the payment's row, which
-- webhooks_note_payment has locked in this transaction.
CREATE OR REPLACE FUNCTION webhooks_hold_reason(p_payment_id text, p_amount bigint)
RETURNS text LANGUAGE sql AS $$
    SELECT CASE
        WHEN p.disputed THEN 'disputed'
        -- Before any event stated the payment's amount, this event's: a
        -- refund event can arrive before any that states it.
        WHEN p.refunded OR (coalesce(p.amount_captured, p.amount) IS NULL
                            AND p_amount BETWEEN 1 AND p.amount_refunded) THEN 'refunded'
        WHEN p.fraud_warned THEN 'fraud_warning'
    END
    FROM payments p
    WHERE p.payment_id = p_payment_id
$$;

-- orders.succeeded: record the success and ship the payment once, if it is
-- an order and not held; else the outcome word says why. A payment is an
-- order when a Checkout Session in payment mode names it, or its
-- PaymentIntent carries the shop's marker (`p_marker_key`) and it pays no
-- invoice; `p_order` is a handler's own decision that it is one. An invoice
-- that names a payment-mode session's PaymentIntent is the session's own:
-- with `invoice_creation` Checkout generates "a post-purchase Invoice for
-- one-time payments" (the session's `invoice`), paid by the PaymentIntent
-- the session created, so no other invoice can be paid by it.
-- `conflicting_account` is the payment's stored account when this event's
-- scope disagrees with it (recorded in scope_conflicts), else NULL.
CREATE OR REPLACE FUNCTION webhooks_payment_succeeded(
    p_event_id text, p_event_type text, p_account text, p_at timestamptz,
    p_payment_id text, p_amount bigint, p_currency text, p_order boolean, p_marker_key text,
    p_checkout_mode text, p_session_id text, p_client_reference_id text, p_customer text,
    p_session_metadata jsonb, p_intent_metadata jsonb, p_invoice_id text,
    OUT outcome text, OUT conflicting_account text
) LANGUAGE plpgsql AS $$
DECLARE
    payment webhooks_payment;
    hold text;
BEGIN
    -- 2: the rank of 'succeeded' in payments._STATUS_RANK.
    payment := webhooks_note_payment(
        p_payment_id => p_payment_id, p_account => p_account, p_status => 'succeeded',
        p_rank => 2::smallint, p_at => p_at, p_amount => p_amount, p_currency => p_currency,
        p_checkout_mode => p_checkout_mode, p_session_id => p_session_id,
        p_client_reference_id => p_client_reference_id, p_customer => p_customer,
        p_session_metadata => p_session_metadata, p_intent_metadata => p_intent_metadata,
        p_invoice_id => p_invoice_id);
    conflicting_account := webhooks_scope_conflict(
        p_object_type => 'payment', p_object_id => p_payment_id,
        p_stored_account => payment.account, p_event_account => p_account, p_event_id => p_event_id);
    IF payment.held_at IS NOT NULL THEN
        outcome := 'held';
    ELSIF NOT p_order AND payment.checkout_mode IS DISTINCT FROM 'payment'
            AND coalesce(payment.invoice_id, '') <> '' THEN
        outcome := 'invoice_payment';
    ELSIF NOT p_order AND payment.checkout_mode IS DISTINCT FROM 'payment'
            AND coalesce(payment.intent_metadata ->> p_marker_key, '') = '' THEN
        outcome := 'not_an_order';
    ELSIF payment.fulfilled THEN
        outcome := 'already_fulfilled';
    ELSE
        hold := webhooks_hold_reason(p_payment_id => p_payment_id, p_amount => p_amount);
        IF hold IS NOT NULL THEN
            -- Held only if never shipped: the row lock taken by the note
            -- orders this against a concurrent success event of the payment.
            UPDATE payments SET held_at = now(), updated_at = now()
            WHERE payment_id = p_payment_id AND held_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM fulfilments f WHERE f.payment_id = p_payment_id);
            IF FOUND THEN
                PERFORM webhooks_payment_job(
                    p_kind => 'payment.review', p_payment_id => p_payment_id, p_payment => payment,
                    p_event_id => p_event_id, p_event_type => p_event_type, p_amount => p_amount,
                    p_currency => p_currency, p_extra => jsonb_build_object('reason', hold));
                outcome := 'held';
            ELSE
                outcome := 'already_fulfilled';  -- shipped before the hold's cause arrived
            END IF;
        ELSE
            -- The unique index refuses a second fulfilment: the job is
            -- written only with the row.
            INSERT INTO fulfilments (payment_id, provider, account, event_id, event_type, amount, currency)
            VALUES (p_payment_id, 'stripe', p_account, p_event_id, p_event_type, p_amount, p_currency)
            ON CONFLICT (payment_id) DO NOTHING;
            IF FOUND THEN
                PERFORM webhooks_payment_job(
                    p_kind => 'order.fulfilled', p_payment_id => p_payment_id, p_payment => payment,
                    p_event_id => p_event_id, p_event_type => p_event_type, p_amount => p_amount,
                    p_currency => p_currency, p_extra => '{}');
                outcome := 'fulfilled';
            ELSE
                outcome := 'already_fulfilled';
            END IF;
        END IF;
    END IF;
END $$;

-- A whole delivery of a payment success event, claim to completion, for
-- ingest's one-statement shape. When the event id is taken, only the
-- claim's columns are set (the answer to replay), as on the Python path.
CREATE OR REPLACE FUNCTION webhooks_deliver_payment_succeeded(
    p_provider text, p_event_id text, p_event_type text, p_account text, p_livemode boolean,
    p_created timestamptz, p_payload text,
    p_payment_id text, p_amount bigint, p_currency text, p_order boolean, p_marker_key text,
    p_checkout_mode text, p_session_id text, p_client_reference_id text, p_customer text,
    p_session_metadata jsonb, p_intent_metadata jsonb, p_invoice_id text,
    OUT claim webhooks_claimed, OUT outcome text, OUT conflicting_account text
) LANGUAGE plpgsql AS $$
BEGIN
    claim := webhooks_claim(
        p_provider => p_provider, p_event_id => p_event_id, p_event_type => p_event_type,
        p_account => p_account, p_livemode => p_livemode, p_created => p_created,
        p_payload => p_payload, p_status => 'processing', p_outcome => NULL,
        p_response_status => NULL, p_response_body => NULL);
    IF claim.ledger_id IS NULL THEN
        RETURN;
    END IF;
    SELECT s.outcome, s.conflicting_account INTO outcome, conflicting_account
    FROM webhooks_payment_succeeded(
        p_event_id => p_event_id, p_event_type => p_event_type, p_account => p_account,
        p_at => p_created, p_payment_id => p_payment_id, p_amount => p_amount,
        p_currency => p_currency, p_order => p_order, p_marker_key => p_marker_key,
        p_checkout_mode => p_checkout_mode, p_session_id => p_session_id,
        p_client_reference_id => p_client_reference_id, p_customer => p_customer,
        p_session_metadata => p_session_metadata, p_intent_metadata => p_intent_metadata,
        p_invoice_id => p_invoice_id) AS s;
    PERFORM webhooks_complete(
        p_ledger_id => claim.ledger_id, p_outcome => outcome, p_response_status => 200::smallint,
        p_response_body => webhooks_answer_body(p_event_id => p_event_id, p_outcome => outcome));
END $$;
