"""The history checker: from every answer the senders got, and the database afterwards,
was anything acknowledged and lost, or done twice?

A history is every attempt every sender made (`Answer`): which event, what
status, when it was sent and when answered, on one monotonic clock. The
checker reads the ledger and the fulfilments for those events and returns a
`Verdict`. `loadtest`'s audit, the fault suite and the failover scenarios
all judge their runs with it.

A kill moment (`killed_at`, on the senders' clock) splits the history in
two. After a failover with asynchronous replication the old primary's last
commits can be gone: an event answered as new before the kill, and as new
again after it, is an event whose first commit was lost and that a later
duplicate claimed afresh (`reclaimed`), not an event done twice. Two new
answers that must both have committed on the same side are a double.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import psycopg


@dataclass(frozen=True)
class Answer:
    event_id: str
    status: int | None  # None: no answer (the connection failed or was cut)
    sent_at: float  # time.monotonic() when the attempt began
    answered_at: float
    replayed: bool = False  # answered with Idempotent-Replayed: true
    account: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def new(self) -> bool:
        """Answered as a first fulfilment: the service says its effects committed just now."""
        return self.status == 200 and not self.replayed


@dataclass(frozen=True)
class Outbox:
    """The outbox's side of a run: the job keys that must have run, and the receiver's log.

    `applied` is every Idempotency-Key the receiver applied an effect for,
    repeats included: a key applied twice is an effect run twice.
    """

    expected: frozenset[str]
    applied: Sequence[str]


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass
class Verdict:
    events: int
    acknowledged: int
    # Answered 2xx, yet not completed in the ledger.
    acknowledged_lost: list[str] = field(default_factory=list)
    # Answered as new twice on one side of the kill (or at all, without one).
    answered_new_twice: list[str] = field(default_factory=list)
    # Answered as new before the kill and again after it: its first commit was lost.
    reclaimed: list[str] = field(default_factory=list)
    # More than one ledger row for an event id (under any provider).
    ledger_doubled: list[str] = field(default_factory=list)
    # (payment id, account) with more than one fulfilment.
    payments_doubled: list[tuple[str, str]] = field(default_factory=list)
    outbox_checked: bool = False
    outbox_lost: list[str] = field(default_factory=list)
    outbox_doubled: list[str] = field(default_factory=list)
    # From the kill to the first 2xx of an attempt sent after it.
    first_ok_after_kill_s: float | None = None

    @property
    def lost(self) -> int:
        return len(self.acknowledged_lost) + len(self.outbox_lost)

    @property
    def doubled(self) -> int:
        return (
            len(self.answered_new_twice)
            + len(self.ledger_doubled)
            + len(self.payments_doubled)
            + len(self.outbox_doubled)
        )

    @property
    def passed(self) -> bool:
        return self.lost == 0 and self.doubled == 0

    def checks(self) -> list[Check]:
        rows = [
            ("no acknowledged event lost", self.acknowledged_lost),
            ("no event answered as new twice", self.answered_new_twice),
            ("no event in the ledger twice", self.ledger_doubled),
            ("no payment fulfilled twice", [f"{p}/{a}" if a else p for p, a in self.payments_doubled]),
        ]
        if self.outbox_checked:
            rows += [
                ("no outbox job lost", self.outbox_lost),
                ("no outbox job applied twice", self.outbox_doubled),
            ]
        return [
            Check(name, not found, f"{len(found)} violations" + (f" (e.g. {found[0]})" if found else ""))
            for name, found in rows
        ]

    def summary(self) -> str:
        after = (
            ""
            if self.first_ok_after_kill_s is None
            else f", first 2xx {self.first_ok_after_kill_s:.2f} s after the kill"
        )
        return (
            f"{self.events} events, {self.acknowledged} acknowledged: {len(self.acknowledged_lost)} "
            f"acknowledged and lost, {len(self.reclaimed)} lost then reclaimed by a duplicate, "
            f"{self.doubled} doubled{after}"
        )


_LEDGER = """
SELECT event_id, count(*), count(*) FILTER (WHERE status = 'completed')
FROM webhook_events
WHERE event_id = ANY(%s)
GROUP BY event_id
"""

# Payments any of the history's events fulfilled, with more than one fulfilment.
_PAYMENTS_DOUBLED = """
SELECT payment_id, account
FROM fulfilments
WHERE (payment_id, account) IN (SELECT payment_id, account FROM fulfilments WHERE event_id = ANY(%s))
GROUP BY payment_id, account
HAVING count(*) > 1
"""


def check(
    conn: psycopg.Connection,
    answers: Iterable[Answer],
    killed_at: float | None = None,
    outbox: Outbox | None = None,
) -> Verdict:
    """The verdict on a history, read against the database `conn` holds now."""
    answers = list(answers)
    by_event: dict[str, list[Answer]] = defaultdict(list)
    for answer in answers:
        by_event[answer.event_id].append(answer)
    acknowledged = sorted(event_id for event_id, seen in by_event.items() if any(a.ok for a in seen))
    event_ids = sorted(by_event)
    ledger = {row[0]: row[1:] for row in conn.execute(_LEDGER, [event_ids])}
    verdict = Verdict(events=len(by_event), acknowledged=len(acknowledged))
    verdict.acknowledged_lost = [e for e in acknowledged if ledger.get(e, (0, 0))[1] == 0]
    verdict.ledger_doubled = sorted(e for e, (rows, _) in ledger.items() if rows > 1)
    verdict.payments_doubled = [(p, a) for p, a in conn.execute(_PAYMENTS_DOUBLED, [event_ids])]
    for event_id, seen in sorted(by_event.items()):
        news = [a for a in seen if a.new]
        if len(news) < 2:
            continue
        if killed_at is not None and len(news) == 2 and not _same_side(news[0], news[1], killed_at):
            verdict.reclaimed.append(event_id)
        else:
            verdict.answered_new_twice.append(event_id)
    if outbox is not None:
        verdict.outbox_checked = True
        applied = Counter(outbox.applied)
        verdict.outbox_lost = sorted(outbox.expected - set(applied))
        verdict.outbox_doubled = sorted(key for key, n in applied.items() if n > 1)
    if killed_at is not None:
        after = [a for a in answers if a.sent_at >= killed_at]
        verdict.first_ok_after_kill_s = first_ok_after(after, killed_at)
    return verdict


def _side(answer: Answer, killed_at: float) -> str | None:
    """Where its commit landed: before the kill (old primary), after it, or unknown (in flight)."""
    if answer.answered_at < killed_at:
        return "before"
    if answer.sent_at >= killed_at:
        return "after"
    return None


def _same_side(a: Answer, b: Answer, killed_at: float) -> bool:
    side = _side(a, killed_at)
    return side is not None and side == _side(b, killed_at)


def first_ok_after(answers: Iterable[Answer], moment: float) -> float | None:
    """Seconds from `moment` to the first 2xx answer, or None if there was none."""
    times = [a.answered_at for a in answers if a.ok and a.answered_at >= moment]
    return min(times) - moment if times else None
