"""Outbox dead letters made in one statement, as pgqueuer holds a job its worker gave up on."""

from __future__ import annotations

from webhooks.core import outbox


def dead_letter(db, key: str, kind: str = "test.effect", error: str | None = None) -> int:
    """A job the worker gave up on (status failed, on_failure="hold"), with the tries it made; its id.

    With `error`, its last try's failure is logged as pgqueuer logs one, saying that."""
    with db.transaction():
        outbox.enqueue(db, kind, {"payment_id": key.rpartition(":")[2]}, key)
    (job_id,) = db.execute(
        "UPDATE pgqueuer SET status = 'failed', attempts = 4 WHERE dedupe_key = %s AND status = 'queued'"
        " RETURNING id",
        [key],
    ).fetchone()
    if error is not None:
        db.execute(
            "INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority, traceback)"
            " VALUES (%s, 'failed', %s, 0, jsonb_build_object('exception_message', %s::text))",
            [job_id, outbox.ENTRYPOINT, error],
        )
    return job_id


def status_of(db, job_id: int) -> tuple[str, int] | None:
    """(status, attempts as pgqueuer counts them), None once the job is gone."""
    return db.execute("SELECT status::text, attempts FROM pgqueuer WHERE id = %s", [job_id]).fetchone()
