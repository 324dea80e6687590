"""The README and docs/ say what the code does: every setting, every handled event, a short front door."""

import re
from pathlib import Path

from webhooks import bootstrap
from webhooks.infra.config import Process, Settings, with_tables

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 250
# Read by the processes but set by the system, not by an operator of the service.
SYSTEM_VARIABLES = {"PATH"}


class _Recording(dict):
    """An empty environment that notes every variable asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return default

    def __contains__(self, key) -> bool:
        self.asked.add(key)
        return False

    def __getitem__(self, key):
        self.asked.add(key)
        raise KeyError(key)


def settings_variables() -> set[str]:
    env = _Recording()
    Settings.from_env(env)
    return env.asked


def process_variables() -> set[str]:
    """Variables gunicorn.conf.py and the package read from os.environ themselves."""
    read = re.compile(
        r"""os\.(?:environ(?:\.get\(|\.setdefault\(|\[)|getenv\()\s*["']([A-Z][A-Z0-9_]+)["']"""
    )
    sources = [ROOT / "gunicorn.conf.py", ROOT / "wsgi.py", *sorted((ROOT / "webhooks").rglob("*.py"))]
    found = {match[1] for path in sources for match in read.finditer(path.read_text())}
    env = _Recording()
    Process.from_env(env)
    return (found | env.asked) - SYSTEM_VARIABLES


def documented(section: str) -> set[str]:
    """The variables named in the first column of the table under `## <section>` in configuration.md."""
    page = (DOCS / "configuration.md").read_text()
    body = page.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_the_configuration_page_lists_every_setting_and_nothing_else():
    variables = settings_variables()
    assert len(variables) > 30  # the recording saw the settings being read
    listed = documented("Settings")
    assert sorted(variables - listed) == [], "settings missing from docs/configuration.md"
    assert sorted(listed - variables) == [], "docs/configuration.md lists settings Settings does not read"


def test_the_configuration_tables_are_the_ones_the_declarations_write():
    page = (DOCS / "configuration.md").read_text()
    assert page == with_tables(page), "docs/configuration.md's tables are stale: run .ci/reference"


def test_the_configuration_page_lists_every_variable_the_processes_read_themselves():
    variables = process_variables() - settings_variables()
    assert {"WEB_CONCURRENCY", "LOG_LEVEL"} <= variables  # the scan found them
    listed = documented("Read by the processes themselves")
    assert sorted(variables - listed) == [], "variables missing from docs/configuration.md"
    assert sorted(listed - variables) == [], "docs/configuration.md lists variables nothing reads"


def test_every_event_type_with_a_handler_is_named_on_its_page():
    registry = bootstrap.handlers(Settings())
    pages = {"stripe": "events.md", "shopify": "providers.md", "github": "providers.md"}
    missing = [
        (provider, event_type)
        for provider, event_type in registry._handlers
        if f"`{event_type}`" not in (DOCS / pages[provider]).read_text()
    ]
    assert missing == []


def test_every_outcome_word_the_domains_bring_is_named_in_the_docs():
    words = bootstrap.handlers(Settings()).outcomes()
    assert {"fulfilled", "dispute_won", "already_done", "pong"} <= words  # the domains brought theirs
    pages = "".join((DOCS / page).read_text() for page in ("events.md", "providers.md", "contract.md"))
    assert sorted(word for word in words if f"`{word}`" not in pages) == []


def test_the_readme_is_a_front_door_with_the_test_command_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert re.search(r"^\./bin/test\b", readme, re.M), "the README's test command line is ./bin/test"
    assert "exec ./bin/test" in (ROOT / ".ci" / "run").read_text()
    first_screen = "\n".join(readme.splitlines()[:60])
    assert "Idempotent-Replayed" in first_screen and "replay --times 2" in first_screen


def test_no_page_speaks_of_this_round_or_of_the_seed_without_saying_what_it_is():
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text()
        assert not re.search(r"\b(this|last|previous) round\b", text, re.I), page.name
        if re.search(r"\bseed (article|handler)", text, re.I):
            assert "idempotency-keys article" in text, page.name
