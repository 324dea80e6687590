-- When `prune` replaced a stored payload's PII fields (WEBHOOK_REDACT_FIELDS),
-- so each row is rewritten once.
ALTER TABLE webhook_events ADD COLUMN redacted_at timestamptz;
ALTER TABLE webhook_failures ADD COLUMN redacted_at timestamptz;
