-- A payment-mode Checkout Session's PaymentIntent is an order even when an
-- invoice names it. With `invoice_creation` Checkout generates "a
-- post-purchase Invoice for one-time payments" (the session's `invoice`),
-- paid by the session's own PaymentIntent: its invoice.paid (pre-basil
-- `invoice.payment_intent`) or invoice_payment.paid names that PaymentIntent.
-- A payment-mode session creates its PaymentIntent, so no other invoice can
-- be paid by it. Before, an invoice naming it first made the session's
-- success `invoice_payment`, and the order never shipped.
--
-- The reasons a succeeded order is held move to webhooks_hold_reason, so a
-- later rule replaces that function alone; it reads the payment's row, which
-- webhooks_note_payment has locked in this transaction.
CREATE FUNCTION webhooks_hold_reason(p_payment_id text, p_amount bigint)
RETURNS text LANGUAGE sql AS $$
    SELECT CASE
        WHEN p.disputed THEN 'disputed'
        -- Fully refunded against the stored amount or, before one is stored,
        -- this event's: a refund event can arrive before any that states it.
        WHEN coalesce(p.amount, p_amount) BETWEEN 1 AND p.amount_refunded THEN 'refunded'
    END
    FROM payments p
    WHERE p.payment_id = p_payment_id
$$;

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
        p_payment_id, p_account, 'succeeded', 2::smallint, p_at, p_amount, p_currency,
        p_checkout_mode, p_session_id, p_client_reference_id, p_customer,
        p_session_metadata, p_intent_metadata, p_invoice_id);
    conflicting_account := webhooks_scope_conflict(
        'payment', p_payment_id, payment.account, p_account, p_event_id);
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
        hold := webhooks_hold_reason(p_payment_id, p_amount);
        IF hold IS NOT NULL THEN
            -- Held only if never shipped: the row lock taken by the note
            -- orders this against a concurrent success event of the payment.
            UPDATE payments SET held_at = now(), updated_at = now()
            WHERE payment_id = p_payment_id AND held_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM fulfilments f WHERE f.payment_id = p_payment_id);
            IF FOUND THEN
                PERFORM webhooks_payment_job(
                    'payment.review', p_payment_id, payment, p_event_id, p_event_type, p_amount,
                    p_currency, jsonb_build_object('reason', hold));
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
                    'order.fulfilled', p_payment_id, payment, p_event_id, p_event_type, p_amount,
                    p_currency, '{}');
                outcome := 'fulfilled';
            ELSE
                outcome := 'already_fulfilled';
            END IF;
        END IF;
    END IF;
END $$;
