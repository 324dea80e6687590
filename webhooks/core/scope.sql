-- A disagreement between an object's stored account and an event's
-- (scope.py, for the Stripe domain's and the Shopify domain's objects, and
-- webhooks_payment_succeeded): recorded with the event's effects. Returns the stored account when they disagree,
-- NULL when they agree. Re-applied by every `python -m webhooks migrate`.
CREATE OR REPLACE FUNCTION webhooks_scope_conflict(
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
