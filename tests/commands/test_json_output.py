"""Every list and show command's --json: one JSON document saying what its table says, through one helper."""

import argparse
import json

from tests.commands.test_ledger_cli import run  # noqa: F401  (the fixture: the CLI with the test's database)
from tests.conftest import post_event
from tests.support.stories import deliver
from tests.support.subscription_stories import Story, dunning
from webhooks.commands import build_parser
from webhooks.traffic import samples


def as_json(run, *argv) -> object:  # noqa: F811
    code, out = run(*argv, "--json")
    assert code == 0 and out.count("\n") == 1, out
    return json.loads(out)


def test_events_list_and_show_say_in_json_what_their_tables_say(run, client):  # noqa: F811
    paid = samples.payment_events()[1]
    assert post_event(client, paid).status_code == 200
    [listed] = as_json(run, "events", "list")
    assert (listed["event_id"], listed["status"], listed["provider"]) == (paid["id"], "completed", "stripe")
    assert listed["received_at"].startswith("20") and "T" in listed["received_at"]
    shown = as_json(run, "events", "show", paid["id"])
    assert shown["event_id"] == paid["id"] and shown["failures"] == []
    assert json.loads(shown["payload"])["id"] == paid["id"]


def test_subscriptions_show_says_the_mirror_and_the_decision_in_json(run, client):  # noqa: F811
    story = Story(1_780_000_000)
    deliver(client, [evt for _, evt in dunning(story, "unpaid")])
    shown = as_json(run, "subscriptions", "show", story.sub)
    assert shown["status"] == "unpaid"
    assert shown["access"]["has_access"] is False and shown["access"]["reason"] == "unpaid"


def test_a_missing_one_says_so_on_stderr_so_stdout_stays_json(run):  # noqa: F811
    assert run("events", "show", "evt_missing", "--json") == (1, "")
    assert run("subscriptions", "show", "sub_missing", "--json") == (1, "")


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every command line's parser, by its words: `events list`, `outbox list`, `reconcile`..."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _commands(child, (*path, name))


def test_every_list_and_show_command_takes_json():
    listing = {words: parser for words, parser in _commands(build_parser()) if words[-1] in ("list", "show")}
    named = {("events", "list"), ("events", "show"), ("outbox", "list"), ("subscriptions", "show")}
    assert named <= set(listing)
    for words, parser in listing.items():
        assert "--json" in parser._option_string_actions, f"{' '.join(words)} has no --json"
