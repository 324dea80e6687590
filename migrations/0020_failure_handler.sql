-- Which handler a failed attempt ran (module.function; NULL: none registered
-- for its type). `events reprocess` compares it with its own handler for the
-- type and refuses to close an event with a different one, or with none.
ALTER TABLE webhook_failures ADD COLUMN handler text;
