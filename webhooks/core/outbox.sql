-- An outbox job (outbox.enqueue), as pgqueuer's own enqueue with
-- on_conflict="skip" writes it: the row and its log entry. The entrypoint
-- and header names are outbox.py's ENTRYPOINT, KEY_HEADER and KIND_HEADER
-- (tests/test_sql_rules.py holds them to it). True when a job was written;
-- false when the same key is still pending. Inside a claim's transaction
-- the job's headers also name its event (webhooks_claim, ledger.sql); jobs
-- enqueued outside one (the access sweep) name none. Re-applied by every
-- `python -m webhooks migrate`.
CREATE OR REPLACE FUNCTION webhooks_enqueue(p_kind text, p_payload jsonb, p_key text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    job bigint;
BEGIN
    INSERT INTO pgqueuer (priority, entrypoint, payload, execute_after, dedupe_key, headers, status)
    VALUES (0, 'webhooks.outbox', convert_to((jsonb_build_object('kind', p_kind) || p_payload)::text, 'UTF8'),
            now(), p_key,
            jsonb_build_object('idempotency-key', p_key, 'kind', p_kind)
            || jsonb_strip_nulls(jsonb_build_object(
                'event-provider', nullif(current_setting('webhooks.event_provider', true), ''),
                'event-id', nullif(current_setting('webhooks.event_id', true), ''))),
            'queued')
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
