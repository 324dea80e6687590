"""The history checker (webhooks/traffic/checker.py) finds each kind of loss and double it names."""

from __future__ import annotations

from webhooks.traffic.checker import Answer, Outbox, check

KILL = 100.0


def _completed(db, *event_ids: str, provider: str = "stripe") -> None:
    for event_id in event_ids:
        db.execute(
            "INSERT INTO webhook_events (provider, event_id, event_type, status) "
            "VALUES (%s, %s, 'test.checked', 'completed')",
            [provider, event_id],
        )


def _new(event_id: str, sent_at: float, answered_at: float | None = None) -> Answer:
    return Answer(event_id, 200, sent_at, sent_at + 0.01 if answered_at is None else answered_at)


def test_an_acknowledged_event_missing_from_the_ledger_is_lost_and_an_unanswered_one_is_not(db):
    _completed(db, "evt_kept")
    answers = [_new("evt_kept", 1), _new("evt_gone", 2), Answer("evt_never", 503, 3, 3.1)]
    verdict = check(db, answers)
    assert verdict.acknowledged_lost == ["evt_gone"]
    assert (verdict.events, verdict.acknowledged, verdict.lost) == (3, 2, 1)
    assert not verdict.passed


def test_an_event_answered_as_new_twice_is_doubled_and_a_replay_is_not(db):
    _completed(db, "evt_twice", "evt_replayed")
    answers = [
        _new("evt_twice", 1),
        _new("evt_twice", 2),
        _new("evt_replayed", 1),
        Answer("evt_replayed", 200, 2, 2.1, replayed=True),
    ]
    verdict = check(db, answers)
    assert verdict.answered_new_twice == ["evt_twice"]
    assert verdict.doubled == 1


def test_new_answers_across_the_kill_are_a_reclaimed_loss_but_on_one_side_a_double(db):
    _completed(db, "evt_across", "evt_after", "evt_in_flight")
    answers = [
        _new("evt_across", KILL - 1),
        _new("evt_across", KILL + 1),
        _new("evt_after", KILL + 1),
        _new("evt_after", KILL + 2),
        # Sent before the kill, answered after: it may have committed on either side.
        _new("evt_in_flight", KILL - 0.5, KILL + 0.5),
        _new("evt_in_flight", KILL + 2),
    ]
    verdict = check(db, answers, killed_at=KILL)
    assert verdict.reclaimed == ["evt_across", "evt_in_flight"]
    assert verdict.answered_new_twice == ["evt_after"]


def test_the_time_to_the_first_2xx_counts_only_attempts_sent_after_the_kill(db):
    _completed(db, "evt_a", "evt_b")
    answers = [
        _new("evt_a", KILL - 0.5, KILL + 0.2),  # in flight at the kill: the old primary's
        Answer("evt_b", 503, KILL + 0.1, KILL + 0.3),
        _new("evt_b", KILL + 1.0, KILL + 1.5),
    ]
    assert check(db, answers, killed_at=KILL).first_ok_after_kill_s == 1.5


def test_a_ledger_row_under_two_providers_and_a_doubled_payment_are_reported(db):
    _completed(db, "evt_shared")
    _completed(db, "evt_shared", provider="other")
    # The unique index forbids a second fulfilment; the check must still see one if it goes.
    db.execute("DROP INDEX fulfilments_payment_id_key")
    for _ in range(2):
        db.execute(
            "INSERT INTO fulfilments (payment_id, provider, account, event_id, event_type) "
            "VALUES ('pi_twice', 'stripe', '', 'evt_shared', 'test.checked')"
        )
    verdict = check(db, [_new("evt_shared", 1)])
    assert verdict.ledger_doubled == ["evt_shared"]
    assert verdict.payments_doubled == [("pi_twice", "")]


def test_outbox_jobs_never_applied_are_lost_and_applied_twice_are_doubled(db):
    outbox = Outbox(expected=frozenset({"job:a", "job:b", "job:c"}), applied=["job:a", "job:b", "job:b"])
    verdict = check(db, [], outbox=outbox)
    assert (verdict.outbox_lost, verdict.outbox_doubled) == (["job:c"], ["job:b"])
    assert [c.name for c in verdict.checks() if not c.passed] == [
        "no outbox job lost",
        "no outbox job applied twice",
    ]
