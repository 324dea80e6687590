"""The Connect scope check that every business row's handler runs."""

from webhooks.domains.stripe import scope
from webhooks.providers.stripe import parse
from webhooks.traffic import samples


def _event(account=None):
    evt = samples.event("payment_intent.succeeded", {"id": "pi_1"})
    if account:
        evt["account"] = account
    return parse(samples.encode(evt).decode())


def _conflicts(db):
    return db.execute(
        "SELECT object_type, object_id, stored_account, event_account FROM scope_conflicts"
    ).fetchall()


def test_an_agreeing_or_first_account_records_nothing(db):
    assert scope.check(db, _event(), "payment", "pi_1", None)
    assert scope.check(db, _event("acct_A"), "payment", "pi_1", "acct_A")
    assert _conflicts(db) == []


def test_another_account_for_a_stored_object_is_recorded_once_and_counted(db):
    before = scope.SCOPE_CONFLICTS.labels("payment")._value.get()
    event = _event("acct_self")
    assert not scope.check(db, event, "payment", "pi_1", "")
    assert not scope.check(db, event, "payment", "pi_1", "")  # the same event again
    assert _conflicts(db) == [("payment", "pi_1", "", "acct_self")]
    assert scope.SCOPE_CONFLICTS.labels("payment")._value.get() == before + 2
