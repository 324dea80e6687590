-- Bulk work as jobs of its own (webhooks/core/bulk.py): a reprocess of the
-- failed events a filter selects, or a requeue of dead letters, runs in the
-- worker a batch at a time, not inside the request that asked for it.
-- The selection is fixed when the operator confirms it: one item per event
-- (or dead letter), in the order they run. An item's done_at commits with
-- its batch, so a worker killed mid-job leaves the rest for the next one.
CREATE TABLE bulk_jobs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action      text NOT NULL CHECK (action IN ('reprocess', 'requeue')),
    -- The filter as it was confirmed, for the audit lines and the progress page.
    selection   jsonb NOT NULL,
    status      text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'cancelled', 'finished')),
    total       integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

CREATE TABLE bulk_job_items (
    job_id        bigint NOT NULL REFERENCES bulk_jobs (id) ON DELETE CASCADE,
    position      integer NOT NULL,
    -- A reprocess's event, or a requeue's dead letter.
    provider      text,
    event_id      text,
    outbox_job_id bigint,
    done_at       timestamptz,
    -- Whether it came to what was asked (completed, requeued), and what it came to, in one line.
    ok            boolean,
    result        text,
    PRIMARY KEY (job_id, position),
    CHECK ((event_id IS NOT NULL AND provider IS NOT NULL) <> (outbox_job_id IS NOT NULL))
);
CREATE INDEX bulk_job_items_waiting ON bulk_job_items (job_id, position) WHERE done_at IS NULL;

-- Where a failed attempt raised: module:function:line of the handler's frame.
ALTER TABLE webhook_failures ADD COLUMN raised_at text;
