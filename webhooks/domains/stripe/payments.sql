-- payments.note: one statement per event, in its current definition
-- (`python -m webhooks migrate` re-applies this file; the row type it
-- returns, webhooks_payment, is migrations/0024's). The row is created or
-- locked (a concurrent first event of the same payment waits here), the
-- identity facts added (they do not change, so the first event to state
-- one keeps it), and the status applied only if this event is not older
-- than the one that set the current status. A conflicting row is locked
-- even when the status is not applied, so the lock order is the same for
-- every event.
CREATE OR REPLACE FUNCTION webhooks_note_payment(
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
