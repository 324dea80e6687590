-- Failed attempts recorded before the service described a database error by
-- its SQLSTATE alone (logs.public_message) kept PostgreSQL's whole text: a
-- unique violation's `DETAIL:  Key (email)=(...)`, a JSON cast's `CONTEXT:
-- JSON data, line 1: ...`. `events show` and /admin print error_message, so
-- those lines go; the first line (the error's own sentence) stays.
UPDATE webhook_failures
SET error_message = split_part(error_message, E'\n', 1)
WHERE error_message LIKE E'%\n%';
