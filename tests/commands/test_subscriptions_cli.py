"""`python -m webhooks subscriptions show SUB_ID`: the mirror and the access decision."""

from tests.commands.test_ledger_cli import run  # noqa: F401  (the fixture: the CLI with the test's database)
from tests.support.stories import deliver
from tests.support.subscription_stories import Story, dunning

START = 1_780_000_000


def test_show_prints_the_mirror_the_latest_invoice_and_the_decision(run, client):
    story = Story(START)
    events = [evt for _, evt in dunning(story, "unpaid")]
    deliver(client, events)
    code, out = run("subscriptions", "show", story.sub)
    assert code == 0
    lines = dict(line.split(None, 1) for line in out.splitlines())
    renewal_invoice = events[3]["data"]["object"]["latest_invoice"]
    assert lines["status"] == "unpaid"
    assert lines["latest_invoice_status"] == f"{renewal_invoice} payment_failed"
    assert lines["access_settings"] == "3 days grace, 02:00:00 renewal margin"
    assert lines["access"] == "no access (unpaid)"


def test_show_of_an_unknown_subscription_is_one_line_and_exit_1(run):
    code, out = run("subscriptions", "show", "sub_missing")
    assert (code, out) == (1, "no subscription sub_missing in the mirror\n")
