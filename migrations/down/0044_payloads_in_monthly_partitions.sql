-- Back to before migrations/0044_payloads_in_monthly_partitions.sql: the
-- payloads in webhook_events again. A payload whose month was dropped comes
-- back as '' (the column is NOT NULL there), its ledger row and answer
-- intact. Run it with the service stopped: it rewrites every ledger row.
-- Then deploy the code of before 0044, whose migrate re-applies its ledger.sql.
LOCK TABLE webhook_events IN ACCESS EXCLUSIVE MODE;
ALTER TABLE webhook_events ADD COLUMN payload text, ADD COLUMN redacted_at timestamptz;
UPDATE webhook_events e SET payload = coalesce(p.payload, ''), redacted_at = p.redacted_at
FROM webhook_events k
LEFT JOIN webhook_payloads p ON p.ledger_id = k.id AND p.received_at = k.received_at
WHERE k.id = e.id;
ALTER TABLE webhook_events ALTER COLUMN payload SET NOT NULL;

CREATE OR REPLACE FUNCTION webhooks_claim(
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
    IF claimed.ledger_id IS NOT NULL THEN
        -- For this transaction only: the outbox jobs it enqueues name the
        -- event that made them (webhooks_enqueue, outbox.sql), for /admin.
        PERFORM set_config('webhooks.event_provider', p_provider, true),
                set_config('webhooks.event_id', p_event_id, true);
    ELSE
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

DROP TABLE webhook_payloads;
DROP FUNCTION webhooks_payload_partition(timestamptz);
DELETE FROM schema_migrations WHERE version = '0044_payloads_in_monthly_partitions';
