-- The schema a fresh `python -m webhooks migrate` makes: migrations/*.sql,
-- then the rule files (webhooks/**/*.sql). Written by `python -m webhooks db
-- schema` from PostgreSQL 15's pg_dump --schema-only; do not edit it by
-- hand. tests/infra/test_schema.py fails when the migrations and this file disagree.

-- TYPE: pgqueuer_status
CREATE TYPE pgqueuer_status AS ENUM (
    'queued',
    'picked',
    'successful',
    'exception',
    'canceled',
    'deleted',
    'failed'
);

-- TYPE: webhooks_claimed
CREATE TYPE webhooks_claimed AS (
	ledger_id bigint,
	held_status text,
	held_response_status smallint,
	held_response_body text,
	held_event_type text
);

-- TYPE: webhooks_payment
CREATE TYPE webhooks_payment AS (
	account text,
	checkout_mode text,
	session_id text,
	client_reference_id text,
	customer text,
	session_metadata jsonb,
	intent_metadata jsonb,
	invoice_id text,
	amount bigint,
	amount_refunded bigint,
	disputed boolean,
	held_at timestamp with time zone,
	status_applied boolean,
	fulfilled boolean
);

-- FUNCTION: fn_pgqueuer_changed()
CREATE FUNCTION fn_pgqueuer_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    to_emit BOOLEAN := false;  -- Flag to decide whether to emit a notification
BEGIN
    -- Check operation type and set the emit flag accordingly
    IF TG_OP = 'UPDATE' AND OLD IS DISTINCT FROM NEW THEN
        to_emit := true;
    ELSIF TG_OP = 'DELETE' THEN
        to_emit := true;
    ELSIF TG_OP = 'INSERT' THEN
        to_emit := true;
    ELSIF TG_OP = 'TRUNCATE' THEN
        to_emit := true;
    END IF;

    -- Perform notification if the emit flag is set
    IF to_emit THEN
        PERFORM pg_notify(
            'ch_pgqueuer',
            json_build_object(
                'channel', 'ch_pgqueuer',
                'operation', lower(TG_OP),
                'sent_at', NOW(),
                'table', TG_TABLE_NAME,
                'type', 'table_changed_event'
            )::text
        );
    END IF;

    -- Return appropriate value based on the operation
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        RETURN OLD;
    ELSE
        RETURN NULL; -- For TRUNCATE and other non-row-specific contexts
    END IF;

END;
$$;

-- FUNCTION: subscription_access_at(timestamp with time zone)
CREATE FUNCTION subscription_access_at(at timestamp with time zone) RETURNS TABLE(subscription_id text, account text, has_access boolean, reason text, access_until timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
SELECT s.subscription_id, s.account,
       d.reason IN ('active', 'trialing', 'past_due_grace', 'paid_through'),
       d.reason,
       CASE d.reason
           WHEN 'past_due_grace' THEN greatest(d.grace_end, d.paid_end)
           WHEN 'paid_through' THEN d.paid_end
           WHEN 'active' THEN d.scheduled_end
           WHEN 'trialing' THEN d.scheduled_end
       END
FROM subscriptions s
CROSS JOIN subscription_access_settings c
CROSS JOIN LATERAL (
    SELECT coalesce(s.current_period_start, s.paid_through)
               + make_interval(days => CASE WHEN s.collection_method = 'send_invoice'
                                            THEN coalesce(s.days_until_due, 0) ELSE 0 END)
               + c.grace AS grace_end,
           s.paid_through + c.renewal_margin AS paid_end,
           coalesce(s.cancel_at, CASE WHEN s.cancel_at_period_end THEN s.current_period_end END)
               AS scheduled_end
) e
CROSS JOIN LATERAL (
    SELECT e.*, CASE
        WHEN s.revoked_at IS NOT NULL THEN 'canceled'
        WHEN s.status IN ('canceled', 'unpaid', 'incomplete_expired', 'paused') THEN s.status
        WHEN at >= e.scheduled_end THEN 'cancel_at'
        WHEN s.status IN ('active', 'trialing') THEN s.status
        WHEN s.status = 'past_due' AND at < e.grace_end THEN 'past_due_grace'
        WHEN at < e.paid_end THEN 'paid_through'
        WHEN s.status = 'incomplete' THEN 'incomplete'
        WHEN s.status = 'past_due' THEN 'grace_expired'
        ELSE 'period_ended'
    END AS reason
) d
$$;

-- FUNCTION: webhooks_answer_body(text, text)
CREATE FUNCTION webhooks_answer_body(p_event_id text, p_outcome text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT format('{"event_id":%s,"outcome":%s}', to_json(p_event_id), to_json(p_outcome))
$$;

-- FUNCTION: webhooks_claim(text, text, text, text, boolean, timestamp with time zone, text, text, text, smallint, text)
CREATE FUNCTION webhooks_claim(p_provider text, p_event_id text, p_event_type text, p_account text, p_livemode boolean, p_created timestamp with time zone, p_payload text, p_status text, p_outcome text, p_response_status smallint, p_response_body text) RETURNS webhooks_claimed
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION: webhooks_complete(bigint, text, smallint, text)
CREATE FUNCTION webhooks_complete(p_ledger_id bigint, p_outcome text, p_response_status smallint, p_response_body text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE webhook_events
    SET status = 'completed', outcome = p_outcome, response_status = p_response_status,
        response_body = p_response_body, completed_at = now()
    WHERE id = p_ledger_id;
END $$;

-- FUNCTION: webhooks_deliver_payment_succeeded(text, text, text, text, boolean, timestamp with time zone, text, text, bigint, text, boolean, text, text, text, text, text, jsonb, jsonb, text)
CREATE FUNCTION webhooks_deliver_payment_succeeded(p_provider text, p_event_id text, p_event_type text, p_account text, p_livemode boolean, p_created timestamp with time zone, p_payload text, p_payment_id text, p_amount bigint, p_currency text, p_order boolean, p_marker_key text, p_checkout_mode text, p_session_id text, p_client_reference_id text, p_customer text, p_session_metadata jsonb, p_intent_metadata jsonb, p_invoice_id text, OUT claim webhooks_claimed, OUT outcome text, OUT conflicting_account text) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION: webhooks_enqueue(text, jsonb, text)
CREATE FUNCTION webhooks_enqueue(p_kind text, p_payload jsonb, p_key text) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION: webhooks_hold_reason(text, bigint)
CREATE FUNCTION webhooks_hold_reason(p_payment_id text, p_amount bigint) RETURNS text
    LANGUAGE sql
    AS $$
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

-- FUNCTION: webhooks_month_partition(text, timestamp with time zone)
CREATE FUNCTION webhooks_month_partition(p_parent text, p_at timestamp with time zone) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    first timestamp := date_trunc('month', p_at AT TIME ZONE 'UTC');
    name text := p_parent || '_p' || to_char(first, 'YYYYMM');
BEGIN
    IF to_regclass(name) IS NOT NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING STORAGE)', name, p_parent);
    PERFORM webhooks_month_settings(p_parent, name);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                   p_parent, name, first AT TIME ZONE 'UTC', (first + interval '1 month') AT TIME ZONE 'UTC');
    RETURN name;
END $$;

-- FUNCTION: webhooks_month_settings(text, text)
CREATE FUNCTION webhooks_month_settings(p_parent text, p_month text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_parent = 'pgqueuer_log' THEN
        EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_scale_factor = 0.02, '
                       'autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0.05, '
                       'autovacuum_analyze_scale_factor = 0.05)', p_month);
    END IF;
END $$;

-- FUNCTION: webhooks_note_payment(text, text, text, smallint, timestamp with time zone, bigint, text, text, text, text, text, jsonb, jsonb, text)
CREATE FUNCTION webhooks_note_payment(p_payment_id text, p_account text, p_status text, p_rank smallint, p_at timestamp with time zone, p_amount bigint, p_currency text, p_checkout_mode text, p_session_id text, p_client_reference_id text, p_customer text, p_session_metadata jsonb, p_intent_metadata jsonb, p_invoice_id text) RETURNS webhooks_payment
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION: webhooks_payload_partition(timestamp with time zone)
CREATE FUNCTION webhooks_payload_partition(p_at timestamp with time zone) RETURNS text
    LANGUAGE sql
    AS $$
    SELECT webhooks_month_partition('webhook_payloads', p_at)
$$;

-- FUNCTION: webhooks_payment_job(text, text, webhooks_payment, text, text, bigint, text, jsonb)
CREATE FUNCTION webhooks_payment_job(p_kind text, p_payment_id text, p_payment webhooks_payment, p_event_id text, p_event_type text, p_amount bigint, p_currency text, p_extra jsonb) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION: webhooks_payment_succeeded(text, text, text, timestamp with time zone, text, bigint, text, boolean, text, text, text, text, text, jsonb, jsonb, text)
CREATE FUNCTION webhooks_payment_succeeded(p_event_id text, p_event_type text, p_account text, p_at timestamp with time zone, p_payment_id text, p_amount bigint, p_currency text, p_order boolean, p_marker_key text, p_checkout_mode text, p_session_id text, p_client_reference_id text, p_customer text, p_session_metadata jsonb, p_intent_metadata jsonb, p_invoice_id text, OUT outcome text, OUT conflicting_account text) RETURNS record
    LANGUAGE plpgsql
    AS $$
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

-- FUNCTION: webhooks_scope_conflict(text, text, text, text, text)
CREATE FUNCTION webhooks_scope_conflict(p_object_type text, p_object_id text, p_stored_account text, p_event_account text, p_event_id text) RETURNS text
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_stored_account IS NULL OR p_stored_account = p_event_account THEN
        RETURN NULL;
    END IF;
    INSERT INTO scope_conflicts (object_type, object_id, stored_account, event_account, event_id)
    VALUES (p_object_type, p_object_id, p_stored_account, p_event_account, p_event_id)
    ON CONFLICT (object_type, object_id, event_id) DO NOTHING;
    RETURN p_stored_account;
END $$;

-- TABLE: admin_sign_in_failures
CREATE TABLE admin_sign_in_failures (
    id bigint NOT NULL,
    failed_at timestamp with time zone DEFAULT now() NOT NULL
);

-- SEQUENCE: admin_sign_in_failures_id_seq
ALTER TABLE admin_sign_in_failures ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME admin_sign_in_failures_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- TABLE: bulk_job_items
CREATE TABLE bulk_job_items (
    job_id bigint NOT NULL,
    "position" integer NOT NULL,
    provider text,
    event_id text,
    outbox_job_id bigint,
    done_at timestamp with time zone,
    ok boolean,
    result text,
    CONSTRAINT bulk_job_items_check CHECK ((((event_id IS NOT NULL) AND (provider IS NOT NULL)) <> (outbox_job_id IS NOT NULL)))
);

-- TABLE: bulk_jobs
CREATE TABLE bulk_jobs (
    id bigint NOT NULL,
    action text NOT NULL,
    selection jsonb NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    total integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT bulk_jobs_action_check CHECK ((action = ANY (ARRAY['reprocess'::text, 'requeue'::text]))),
    CONSTRAINT bulk_jobs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'cancelled'::text, 'finished'::text])))
);

-- SEQUENCE: bulk_jobs_id_seq
ALTER TABLE bulk_jobs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME bulk_jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- TABLE: checkout_line_items
CREATE TABLE checkout_line_items (
    session_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    items jsonb NOT NULL,
    stored_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE: disputes
CREATE TABLE disputes (
    dispute_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    payment_id text NOT NULL,
    charge_id text,
    amount bigint,
    currency text,
    reason text,
    event_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    status text,
    status_rank smallint DEFAULT 0 NOT NULL,
    due_by timestamp with time zone,
    funds_withdrawn boolean DEFAULT false NOT NULL,
    funds_reinstated boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE: fraud_warnings
CREATE TABLE fraud_warnings (
    warning_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    payment_id text NOT NULL,
    charge_id text,
    fraud_type text,
    actionable boolean NOT NULL,
    event_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE: fulfilments
CREATE TABLE fulfilments (
    id bigint NOT NULL,
    payment_id text NOT NULL,
    provider text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    amount bigint,
    currency text,
    fulfilled_at timestamp with time zone DEFAULT now() NOT NULL
);

-- SEQUENCE: fulfilments_id_seq
CREATE SEQUENCE fulfilments_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: fulfilments_id_seq
ALTER SEQUENCE fulfilments_id_seq OWNED BY fulfilments.id;

-- TABLE: invoice_fulfilments
CREATE TABLE invoice_fulfilments (
    id bigint NOT NULL,
    invoice_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    subscription_id text,
    event_id text NOT NULL,
    amount_paid bigint,
    currency text,
    period_start timestamp with time zone,
    period_end timestamp with time zone,
    fulfilled_at timestamp with time zone DEFAULT now() NOT NULL
);

-- SEQUENCE: invoice_fulfilments_id_seq
CREATE SEQUENCE invoice_fulfilments_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: invoice_fulfilments_id_seq
ALTER SEQUENCE invoice_fulfilments_id_seq OWNED BY invoice_fulfilments.id;

-- TABLE: invoices
CREATE TABLE invoices (
    invoice_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    subscription_id text,
    status text,
    status_rank smallint,
    status_at timestamp with time zone,
    amount_due bigint,
    amount_paid bigint,
    currency text,
    attempt_count integer,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT invoices_status_check CHECK ((status = ANY (ARRAY['payment_failed'::text, 'paid'::text])))
);

-- TABLE: payments
CREATE TABLE payments (
    payment_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    status text,
    status_rank smallint,
    status_at timestamp with time zone,
    amount bigint,
    currency text,
    amount_refunded bigint DEFAULT 0 NOT NULL,
    refund_at timestamp with time zone,
    disputed boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    checkout_mode text,
    session_id text,
    client_reference_id text,
    customer text,
    session_metadata jsonb,
    intent_metadata jsonb,
    invoice_id text,
    held_at timestamp with time zone,
    charge_refunded bigint DEFAULT 0 NOT NULL,
    amount_captured bigint,
    released bigint DEFAULT 0 NOT NULL,
    refunded boolean GENERATED ALWAYS AS (COALESCE(((amount_refunded > 0) AND (amount_refunded >= COALESCE(amount_captured, amount))), false)) STORED,
    fraud_warned boolean DEFAULT false NOT NULL,
    CONSTRAINT payments_status_check CHECK ((status = ANY (ARRAY['awaiting_payment'::text, 'failed'::text, 'succeeded'::text])))
);

-- TABLE: pgqueuer
CREATE TABLE pgqueuer (
    id bigint NOT NULL,
    priority integer NOT NULL,
    queue_manager_id uuid,
    created timestamp with time zone DEFAULT now() NOT NULL,
    updated timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat timestamp with time zone DEFAULT now() NOT NULL,
    execute_after timestamp with time zone DEFAULT now() NOT NULL,
    status pgqueuer_status NOT NULL,
    entrypoint text NOT NULL,
    dedupe_key text,
    payload bytea,
    headers jsonb,
    attempts integer DEFAULT 0 NOT NULL,
    slot bigint
);

-- SEQUENCE: pgqueuer_id_seq
CREATE SEQUENCE pgqueuer_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: pgqueuer_id_seq
ALTER SEQUENCE pgqueuer_id_seq OWNED BY pgqueuer.id;

-- TABLE: pgqueuer_log
CREATE TABLE pgqueuer_log (
    id bigint NOT NULL,
    created timestamp with time zone DEFAULT now() NOT NULL,
    job_id bigint NOT NULL,
    status pgqueuer_status NOT NULL,
    priority integer NOT NULL,
    entrypoint text NOT NULL,
    traceback jsonb,
    aggregated boolean DEFAULT false
)
PARTITION BY RANGE (created);

-- SEQUENCE: pgqueuer_log_id_seq
ALTER TABLE pgqueuer_log ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME pgqueuer_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- TABLE: pgqueuer_schedules
CREATE TABLE pgqueuer_schedules (
    id bigint NOT NULL,
    expression text NOT NULL,
    entrypoint text NOT NULL,
    heartbeat timestamp with time zone DEFAULT now() NOT NULL,
    created timestamp with time zone DEFAULT now() NOT NULL,
    updated timestamp with time zone DEFAULT now() NOT NULL,
    next_run timestamp with time zone DEFAULT now() NOT NULL,
    last_run timestamp with time zone,
    status pgqueuer_status DEFAULT 'queued'::pgqueuer_status
);

-- SEQUENCE: pgqueuer_schedules_id_seq
CREATE SEQUENCE pgqueuer_schedules_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: pgqueuer_schedules_id_seq
ALTER SEQUENCE pgqueuer_schedules_id_seq OWNED BY pgqueuer_schedules.id;

-- TABLE: pgqueuer_statistics
CREATE TABLE pgqueuer_statistics (
    id bigint NOT NULL,
    created timestamp with time zone DEFAULT date_trunc('sec'::text, now()) NOT NULL,
    count bigint NOT NULL,
    priority integer NOT NULL,
    status pgqueuer_status NOT NULL,
    entrypoint text NOT NULL
);

-- SEQUENCE: pgqueuer_statistics_id_seq
CREATE SEQUENCE pgqueuer_statistics_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: pgqueuer_statistics_id_seq
ALTER SEQUENCE pgqueuer_statistics_id_seq OWNED BY pgqueuer_statistics.id;

-- TABLE: refunds
CREATE TABLE refunds (
    refund_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    payment_id text NOT NULL,
    charge_id text,
    amount bigint,
    currency text,
    event_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    status text NOT NULL,
    status_rank smallint NOT NULL,
    failure_reason text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    reason text,
    CONSTRAINT refunds_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'requires_action'::text, 'succeeded'::text, 'failed'::text, 'canceled'::text])))
);

-- TABLE: schema_definitions
CREATE TABLE schema_definitions (
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE: schema_migrations
CREATE TABLE schema_migrations (
    version text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE: scope_conflicts
CREATE TABLE scope_conflicts (
    id bigint NOT NULL,
    object_type text NOT NULL,
    object_id text NOT NULL,
    stored_account text NOT NULL,
    event_account text NOT NULL,
    event_id text NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);

-- SEQUENCE: scope_conflicts_id_seq
CREATE SEQUENCE scope_conflicts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: scope_conflicts_id_seq
ALTER SEQUENCE scope_conflicts_id_seq OWNED BY scope_conflicts.id;

-- TABLE: shopify_compliance_requests
CREATE TABLE shopify_compliance_requests (
    body_sha256 text NOT NULL,
    topic text NOT NULL,
    shop text NOT NULL,
    event_id text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE: shopify_fulfilments
CREATE TABLE shopify_fulfilments (
    id bigint NOT NULL,
    shop text NOT NULL,
    order_id bigint NOT NULL,
    event_id text NOT NULL,
    fulfilled_at timestamp with time zone DEFAULT now() NOT NULL
);

-- SEQUENCE: shopify_fulfilments_id_seq
CREATE SEQUENCE shopify_fulfilments_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: shopify_fulfilments_id_seq
ALTER SEQUENCE shopify_fulfilments_id_seq OWNED BY shopify_fulfilments.id;

-- TABLE: shopify_orders
CREATE TABLE shopify_orders (
    shop text NOT NULL,
    order_id bigint NOT NULL,
    name text,
    customer_id bigint,
    paid_at timestamp with time zone,
    refunded_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    held_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

-- TABLE: shopify_refunds
CREATE TABLE shopify_refunds (
    shop text NOT NULL,
    refund_id bigint NOT NULL,
    order_id bigint NOT NULL,
    event_id text NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL
);

-- VIEW: subscription_access
CREATE VIEW subscription_access AS
 SELECT subscription_access_at.subscription_id,
    subscription_access_at.account,
    subscription_access_at.has_access,
    subscription_access_at.reason,
    subscription_access_at.access_until
   FROM subscription_access_at(now()) subscription_access_at(subscription_id, account, has_access, reason, access_until);

-- TABLE: subscription_access_settings
CREATE TABLE subscription_access_settings (
    only_row boolean DEFAULT true NOT NULL,
    grace interval DEFAULT '3 days'::interval NOT NULL,
    renewal_margin interval DEFAULT '02:00:00'::interval NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT subscription_access_settings_only_row_check CHECK (only_row)
);

-- TABLE: subscriptions
CREATE TABLE subscriptions (
    subscription_id text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    paid_through timestamp with time zone,
    revoked_at timestamp with time zone,
    revoked_reason text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    status text,
    status_rank smallint,
    status_at timestamp with time zone,
    customer text,
    cancel_at_period_end boolean,
    cancel_at timestamp with time zone,
    canceled_at timestamp with time zone,
    trial_end timestamp with time zone,
    pause_behavior text,
    pause_resumes_at timestamp with time zone,
    current_period_start timestamp with time zone,
    current_period_end timestamp with time zone,
    latest_invoice text,
    notified_access boolean,
    collection_method text,
    days_until_due integer
);

-- TABLE: webhook_events
CREATE TABLE webhook_events (
    id bigint NOT NULL,
    provider text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    account text DEFAULT ''::text NOT NULL,
    livemode boolean,
    event_created timestamp with time zone,
    status text DEFAULT 'processing'::text NOT NULL,
    outcome text,
    response_status smallint,
    response_body text,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    completed_at timestamp with time zone,
    CONSTRAINT webhook_events_status_check CHECK ((status = ANY (ARRAY['processing'::text, 'completed'::text])))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_vacuum_insert_scale_factor='0.05', autovacuum_analyze_scale_factor='0.02');

-- SEQUENCE: webhook_events_id_seq
CREATE SEQUENCE webhook_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: webhook_events_id_seq
ALTER SEQUENCE webhook_events_id_seq OWNED BY webhook_events.id;

-- TABLE: webhook_failures
CREATE TABLE webhook_failures (
    id bigint NOT NULL,
    provider text NOT NULL,
    event_id text NOT NULL,
    event_type text,
    error_class text NOT NULL,
    error_message text,
    payload text,
    failed_at timestamp with time zone DEFAULT now() NOT NULL,
    redacted_at timestamp with time zone,
    handler text,
    account text,
    raised_at text
);

-- SEQUENCE: webhook_failures_id_seq
CREATE SEQUENCE webhook_failures_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE OWNED BY: webhook_failures_id_seq
ALTER SEQUENCE webhook_failures_id_seq OWNED BY webhook_failures.id;

-- TABLE: webhook_payloads
CREATE TABLE webhook_payloads (
    ledger_id bigint NOT NULL,
    received_at timestamp with time zone NOT NULL,
    payload text NOT NULL,
    redacted_at timestamp with time zone
)
PARTITION BY RANGE (received_at);

-- DEFAULT: fulfilments id
ALTER TABLE ONLY fulfilments ALTER COLUMN id SET DEFAULT nextval('fulfilments_id_seq'::regclass);

-- DEFAULT: invoice_fulfilments id
ALTER TABLE ONLY invoice_fulfilments ALTER COLUMN id SET DEFAULT nextval('invoice_fulfilments_id_seq'::regclass);

-- DEFAULT: pgqueuer id
ALTER TABLE ONLY pgqueuer ALTER COLUMN id SET DEFAULT nextval('pgqueuer_id_seq'::regclass);

-- DEFAULT: pgqueuer_schedules id
ALTER TABLE ONLY pgqueuer_schedules ALTER COLUMN id SET DEFAULT nextval('pgqueuer_schedules_id_seq'::regclass);

-- DEFAULT: pgqueuer_statistics id
ALTER TABLE ONLY pgqueuer_statistics ALTER COLUMN id SET DEFAULT nextval('pgqueuer_statistics_id_seq'::regclass);

-- DEFAULT: scope_conflicts id
ALTER TABLE ONLY scope_conflicts ALTER COLUMN id SET DEFAULT nextval('scope_conflicts_id_seq'::regclass);

-- DEFAULT: shopify_fulfilments id
ALTER TABLE ONLY shopify_fulfilments ALTER COLUMN id SET DEFAULT nextval('shopify_fulfilments_id_seq'::regclass);

-- DEFAULT: webhook_events id
ALTER TABLE ONLY webhook_events ALTER COLUMN id SET DEFAULT nextval('webhook_events_id_seq'::regclass);

-- DEFAULT: webhook_failures id
ALTER TABLE ONLY webhook_failures ALTER COLUMN id SET DEFAULT nextval('webhook_failures_id_seq'::regclass);

-- CONSTRAINT: admin_sign_in_failures admin_sign_in_failures_pkey
ALTER TABLE ONLY admin_sign_in_failures
    ADD CONSTRAINT admin_sign_in_failures_pkey PRIMARY KEY (id);

-- CONSTRAINT: bulk_job_items bulk_job_items_pkey
ALTER TABLE ONLY bulk_job_items
    ADD CONSTRAINT bulk_job_items_pkey PRIMARY KEY (job_id, "position");

-- CONSTRAINT: bulk_jobs bulk_jobs_pkey
ALTER TABLE ONLY bulk_jobs
    ADD CONSTRAINT bulk_jobs_pkey PRIMARY KEY (id);

-- CONSTRAINT: checkout_line_items checkout_line_items_pkey
ALTER TABLE ONLY checkout_line_items
    ADD CONSTRAINT checkout_line_items_pkey PRIMARY KEY (session_id, account);

-- CONSTRAINT: disputes disputes_pkey
ALTER TABLE ONLY disputes
    ADD CONSTRAINT disputes_pkey PRIMARY KEY (dispute_id);

-- CONSTRAINT: fraud_warnings fraud_warnings_pkey
ALTER TABLE ONLY fraud_warnings
    ADD CONSTRAINT fraud_warnings_pkey PRIMARY KEY (warning_id);

-- CONSTRAINT: fulfilments fulfilments_pkey
ALTER TABLE ONLY fulfilments
    ADD CONSTRAINT fulfilments_pkey PRIMARY KEY (id);

-- CONSTRAINT: invoice_fulfilments invoice_fulfilments_pkey
ALTER TABLE ONLY invoice_fulfilments
    ADD CONSTRAINT invoice_fulfilments_pkey PRIMARY KEY (id);

-- CONSTRAINT: invoices invoices_pkey
ALTER TABLE ONLY invoices
    ADD CONSTRAINT invoices_pkey PRIMARY KEY (invoice_id);

-- CONSTRAINT: payments payments_pkey
ALTER TABLE ONLY payments
    ADD CONSTRAINT payments_pkey PRIMARY KEY (payment_id);

-- CONSTRAINT: pgqueuer_log pgqueuer_log_pkey
ALTER TABLE ONLY pgqueuer_log
    ADD CONSTRAINT pgqueuer_log_pkey PRIMARY KEY (id, created);

-- CONSTRAINT: pgqueuer pgqueuer_pkey
ALTER TABLE ONLY pgqueuer
    ADD CONSTRAINT pgqueuer_pkey PRIMARY KEY (id);

-- CONSTRAINT: pgqueuer_schedules pgqueuer_schedules_expression_entrypoint_key
ALTER TABLE ONLY pgqueuer_schedules
    ADD CONSTRAINT pgqueuer_schedules_expression_entrypoint_key UNIQUE (expression, entrypoint);

-- CONSTRAINT: pgqueuer_schedules pgqueuer_schedules_pkey
ALTER TABLE ONLY pgqueuer_schedules
    ADD CONSTRAINT pgqueuer_schedules_pkey PRIMARY KEY (id);

-- CONSTRAINT: pgqueuer_statistics pgqueuer_statistics_pkey
ALTER TABLE ONLY pgqueuer_statistics
    ADD CONSTRAINT pgqueuer_statistics_pkey PRIMARY KEY (id);

-- CONSTRAINT: refunds refunds_pkey
ALTER TABLE ONLY refunds
    ADD CONSTRAINT refunds_pkey PRIMARY KEY (refund_id);

-- CONSTRAINT: schema_definitions schema_definitions_pkey
ALTER TABLE ONLY schema_definitions
    ADD CONSTRAINT schema_definitions_pkey PRIMARY KEY (name);

-- CONSTRAINT: schema_migrations schema_migrations_pkey
ALTER TABLE ONLY schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

-- CONSTRAINT: scope_conflicts scope_conflicts_object_type_object_id_event_id_key
ALTER TABLE ONLY scope_conflicts
    ADD CONSTRAINT scope_conflicts_object_type_object_id_event_id_key UNIQUE (object_type, object_id, event_id);

-- CONSTRAINT: scope_conflicts scope_conflicts_pkey
ALTER TABLE ONLY scope_conflicts
    ADD CONSTRAINT scope_conflicts_pkey PRIMARY KEY (id);

-- CONSTRAINT: shopify_compliance_requests shopify_compliance_requests_pkey
ALTER TABLE ONLY shopify_compliance_requests
    ADD CONSTRAINT shopify_compliance_requests_pkey PRIMARY KEY (body_sha256);

-- CONSTRAINT: shopify_fulfilments shopify_fulfilments_order_key
ALTER TABLE ONLY shopify_fulfilments
    ADD CONSTRAINT shopify_fulfilments_order_key UNIQUE (order_id);

-- CONSTRAINT: shopify_fulfilments shopify_fulfilments_pkey
ALTER TABLE ONLY shopify_fulfilments
    ADD CONSTRAINT shopify_fulfilments_pkey PRIMARY KEY (id);

-- CONSTRAINT: shopify_orders shopify_orders_pkey
ALTER TABLE ONLY shopify_orders
    ADD CONSTRAINT shopify_orders_pkey PRIMARY KEY (order_id);

-- CONSTRAINT: shopify_refunds shopify_refunds_pkey
ALTER TABLE ONLY shopify_refunds
    ADD CONSTRAINT shopify_refunds_pkey PRIMARY KEY (refund_id);

-- CONSTRAINT: subscription_access_settings subscription_access_settings_pkey
ALTER TABLE ONLY subscription_access_settings
    ADD CONSTRAINT subscription_access_settings_pkey PRIMARY KEY (only_row);

-- CONSTRAINT: subscriptions subscriptions_pkey
ALTER TABLE ONLY subscriptions
    ADD CONSTRAINT subscriptions_pkey PRIMARY KEY (subscription_id);

-- CONSTRAINT: webhook_events webhook_events_pkey
ALTER TABLE ONLY webhook_events
    ADD CONSTRAINT webhook_events_pkey PRIMARY KEY (id);

-- CONSTRAINT: webhook_events webhook_events_provider_event_id_key
ALTER TABLE ONLY webhook_events
    ADD CONSTRAINT webhook_events_provider_event_id_key UNIQUE (provider, event_id);

-- CONSTRAINT: webhook_failures webhook_failures_pkey
ALTER TABLE ONLY webhook_failures
    ADD CONSTRAINT webhook_failures_pkey PRIMARY KEY (id);

-- CONSTRAINT: webhook_payloads webhook_payloads_pkey
ALTER TABLE ONLY webhook_payloads
    ADD CONSTRAINT webhook_payloads_pkey PRIMARY KEY (ledger_id, received_at);

-- INDEX: admin_sign_in_failures_failed_at
CREATE INDEX admin_sign_in_failures_failed_at ON admin_sign_in_failures USING btree (failed_at);

-- INDEX: bulk_job_items_waiting
CREATE INDEX bulk_job_items_waiting ON bulk_job_items USING btree (job_id, "position") WHERE (done_at IS NULL);

-- INDEX: disputes_payment_idx
CREATE INDEX disputes_payment_idx ON disputes USING btree (payment_id);

-- INDEX: fraud_warnings_payment_idx
CREATE INDEX fraud_warnings_payment_idx ON fraud_warnings USING btree (payment_id);

-- INDEX: fulfilments_payment_id_key
CREATE UNIQUE INDEX fulfilments_payment_id_key ON fulfilments USING btree (payment_id);

-- INDEX: invoice_fulfilments_invoice_id_key
CREATE UNIQUE INDEX invoice_fulfilments_invoice_id_key ON invoice_fulfilments USING btree (invoice_id);

-- INDEX: pgqueuer_ep_ea_idx
CREATE INDEX pgqueuer_ep_ea_idx ON pgqueuer USING btree (entrypoint, execute_after) WHERE (status = 'queued'::pgqueuer_status);

-- INDEX: pgqueuer_ep_prio_id_idx
CREATE INDEX pgqueuer_ep_prio_id_idx ON pgqueuer USING btree (entrypoint, priority DESC, id) WHERE (status = 'queued'::pgqueuer_status);

-- INDEX: pgqueuer_log_job_id_status
CREATE INDEX pgqueuer_log_job_id_status ON ONLY pgqueuer_log USING btree (job_id, created DESC);

-- COMMENT: INDEX pgqueuer_log_job_id_status
COMMENT ON INDEX pgqueuer_log_job_id_status IS 'a job''s last error (outbox list) and pgqueuer''s job status by job id';

-- INDEX: pgqueuer_log_not_aggregated
CREATE INDEX pgqueuer_log_not_aggregated ON ONLY pgqueuer_log USING btree ((1)) WHERE (NOT aggregated);

-- COMMENT: INDEX pgqueuer_log_not_aggregated
COMMENT ON INDEX pgqueuer_log_not_aggregated IS 'pgqueuer''s roll-up of the log into pgqueuer_statistics (rows not yet aggregated)';

-- COMMENT: INDEX pgqueuer_log_pkey
COMMENT ON INDEX pgqueuer_log_pkey IS 'a log row''s identity, which a partitioned table must key with its month; no query reads the log by id';

-- INDEX: pgqueuer_picked_heartbeat_idx
CREATE INDEX pgqueuer_picked_heartbeat_idx ON pgqueuer USING btree (heartbeat) WHERE (status = 'picked'::pgqueuer_status);

-- INDEX: pgqueuer_picked_slot_idx
CREATE UNIQUE INDEX pgqueuer_picked_slot_idx ON pgqueuer USING btree (entrypoint, slot) WHERE ((status = 'picked'::pgqueuer_status) AND (slot IS NOT NULL));

-- INDEX: pgqueuer_priority_id_id1_idx
CREATE INDEX pgqueuer_priority_id_id1_idx ON pgqueuer USING btree (priority, id DESC) INCLUDE (id) WHERE (status = 'queued'::pgqueuer_status);

-- INDEX: pgqueuer_queue_manager_id_idx
CREATE INDEX pgqueuer_queue_manager_id_idx ON pgqueuer USING btree (queue_manager_id) WHERE (queue_manager_id IS NOT NULL);

-- INDEX: pgqueuer_statistics_unique_count
CREATE UNIQUE INDEX pgqueuer_statistics_unique_count ON pgqueuer_statistics USING btree (priority, date_trunc('sec'::text, timezone('UTC'::text, created)), status, entrypoint);

-- INDEX: pgqueuer_unique_dedupe_key
CREATE UNIQUE INDEX pgqueuer_unique_dedupe_key ON pgqueuer USING btree (dedupe_key) WHERE ((status = ANY (ARRAY['queued'::pgqueuer_status, 'picked'::pgqueuer_status])) AND (dedupe_key IS NOT NULL));

-- INDEX: pgqueuer_updated_id_id1_idx
CREATE INDEX pgqueuer_updated_id_id1_idx ON pgqueuer USING btree (updated, id DESC) INCLUDE (id) WHERE (status = 'picked'::pgqueuer_status);

-- INDEX: refunds_payment_idx
CREATE INDEX refunds_payment_idx ON refunds USING btree (payment_id);

-- INDEX: shopify_orders_customer_idx
CREATE INDEX shopify_orders_customer_idx ON shopify_orders USING btree (shop, customer_id) WHERE (customer_id IS NOT NULL);

-- INDEX: shopify_refunds_order_idx
CREATE INDEX shopify_refunds_order_idx ON shopify_refunds USING btree (order_id);

-- COMMENT: INDEX webhook_events_pkey
COMMENT ON INDEX webhook_events_pkey IS 'the completion and re-opening of a claim by its id (webhooks_complete, ledger.reopen)';

-- COMMENT: INDEX webhook_events_provider_event_id_key
COMMENT ON INDEX webhook_events_provider_event_id_key IS 'the claim (webhooks_claim, webhooks/core/ledger.sql): one row per provider and event id';

-- INDEX: webhook_events_received_at_idx
CREATE INDEX webhook_events_received_at_idx ON webhook_events USING btree (received_at);

-- COMMENT: INDEX webhook_events_received_at_idx
COMMENT ON INDEX webhook_events_received_at_idx IS 'retention''s batches along time (prune), the events list by time (history, /admin activity)';

-- INDEX: webhook_events_shopify_shop_idx
CREATE INDEX webhook_events_shopify_shop_idx ON webhook_events USING btree (account) WHERE (provider = 'shopify'::text);

-- COMMENT: INDEX webhook_events_shopify_shop_idx
COMMENT ON INDEX webhook_events_shopify_shop_idx IS 'a Shopify shop''s stored payloads, for its compliance requests (domains/shopify/payloads.py)';

-- INDEX: webhook_failures_event_idx
CREATE INDEX webhook_failures_event_idx ON webhook_failures USING btree (provider, event_id);

-- COMMENT: INDEX webhook_failures_event_idx
COMMENT ON INDEX webhook_failures_event_idx IS 'an event''s failed attempts (events show, /admin, the events list''s failures)';

-- INDEX: webhook_failures_failed_at_idx
CREATE INDEX webhook_failures_failed_at_idx ON webhook_failures USING btree (failed_at);

-- COMMENT: INDEX webhook_failures_failed_at_idx
COMMENT ON INDEX webhook_failures_failed_at_idx IS 'retention''s batches along time (prune), the failures of a window (/admin activity)';

-- COMMENT: INDEX webhook_payloads_pkey
COMMENT ON INDEX webhook_payloads_pkey IS 'a ledger row''s payload, joined by (ledger_id, received_at): one partition, one probe';

-- FK CONSTRAINT: bulk_job_items bulk_job_items_job_id_fkey
ALTER TABLE ONLY bulk_job_items
    ADD CONSTRAINT bulk_job_items_job_id_fkey FOREIGN KEY (job_id) REFERENCES bulk_jobs(id) ON DELETE CASCADE;
