-- The ledger's claim and completion (ledger.py), in their current
-- definitions: `python -m webhooks migrate` re-applies this file after the
-- numbered migrations (webhooks_claimed, the row a claim returns, is
-- migrations/0024's). A one-statement delivery runs them inside its own
-- function too (webhooks_deliver_payment_succeeded, orders.sql).
-- plpgsql, not SQL functions: plpgsql keeps its plans for the session,
-- PostgreSQL 15 plans a SQL function's statements on every call.

-- The claim. A duplicate blocks here until the claim it meets commits or
-- rolls back, or until lock_timeout. When the event id is taken, the row
-- that holds it is read as it is once that wait is over, so that a
-- redelivery is answered from the same statement.
CREATE OR REPLACE FUNCTION webhooks_claim(
    p_provider text, p_event_id text, p_event_type text, p_account text, p_livemode boolean,
    p_created timestamptz, p_payload text, p_status text, p_outcome text,
    p_response_status smallint, p_response_body text
) RETURNS webhooks_claimed LANGUAGE plpgsql AS $$
DECLARE
    claimed webhooks_claimed;
    received timestamptz;
BEGIN
    INSERT INTO webhook_events
        (provider, event_id, event_type, account, livemode, event_created,
         status, outcome, response_status, response_body, completed_at)
    VALUES (p_provider, p_event_id, p_event_type, p_account, p_livemode, p_created,
            p_status, p_outcome, p_response_status, p_response_body,
            CASE WHEN p_status = 'completed' THEN now() END)
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING id, received_at INTO claimed.ledger_id, received;
    IF claimed.ledger_id IS NOT NULL THEN
        -- The payload in its month's partition (migrations/0044), in the
        -- claim's transaction: both commit, or neither.
        INSERT INTO webhook_payloads (ledger_id, received_at, payload)
        VALUES (claimed.ledger_id, received, p_payload);
        -- For this transaction only: the outbox jobs it enqueues name the
        -- event that made them (webhooks_enqueue, outbox.sql), for /admin.
        PERFORM set_config('webhooks.event_provider', p_provider, true),
                set_config('webhooks.event_id', p_event_id, true);
    ELSE
        -- A statement of its own, so a snapshot of its own: it sees the
        -- row the INSERT waited for (none if that was pruned meanwhile).
        -- The answer is the narrow row's: it outlives its payload's partition.
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
CREATE OR REPLACE FUNCTION webhooks_answer_body(p_event_id text, p_outcome text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT format('{"event_id":%s,"outcome":%s}', to_json(p_event_id), to_json(p_outcome))
$$;

CREATE OR REPLACE FUNCTION webhooks_complete(
    p_ledger_id bigint, p_outcome text, p_response_status smallint, p_response_body text
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE webhook_events
    SET status = 'completed', outcome = p_outcome, response_status = p_response_status,
        response_body = p_response_body, completed_at = now()
    WHERE id = p_ledger_id;
END $$;
