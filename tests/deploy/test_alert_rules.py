"""deploy/prometheus/alerts.yml: valid, each alert unit-tested firing and not, each with its runbook section.

promtool (Debian's `prometheus` package) checks the rules and runs their
unit tests, tests/deploy/alerts_test.yml; CI installs it and sets
WEBHOOKS_REQUIRE_PROMTOOL=1, so there a missing promtool fails rather than
skips. tests/deploy/test_metric_names.py checks the metrics they read.
"""

import re

import yaml
from markdown.extensions.toc import slugify

from tests.conftest import ROOT
from tests.deploy.shipped import ALERT_TESTS, ALERTS, metric_names, run, tool

SEVERITIES = {"critical", "warning", "info"}
RUNBOOK = re.compile(r"docs/operating\.md#([a-z0-9-]+)")


def alerts() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def operating_sections() -> set[str]:
    """The anchors mkdocs gives docs/operating.md's headings (mkdocs.yml's toc)."""
    text = re.sub(r"^```.*?^```", "", (ROOT / "docs" / "operating.md").read_text(), flags=re.S | re.M)
    return {slugify(heading, "-") for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


def test_promtool_finds_the_rules_valid():
    checked = run(
        [tool("promtool", "prometheus", "WEBHOOKS_REQUIRE_PROMTOOL"), "check", "rules", str(ALERTS)]
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def test_every_unit_test_of_the_alerts_passes():
    tested = run(
        [tool("promtool", "prometheus", "WEBHOOKS_REQUIRE_PROMTOOL"), "test", "rules", str(ALERT_TESTS)]
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_unit_tested_firing_and_not_firing():
    firing, silent = set(), set()
    for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names - firing == set(), "never tested firing"
    assert names - silent == set(), "never tested not firing"


def test_every_alert_has_a_severity_a_summary_and_a_runbook_section_that_exists():
    sections = operating_sections()
    for rule in alerts():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        runbook = RUNBOOK.fullmatch(rule["annotations"]["runbook"])
        assert runbook, f"{rule['alert']}: runbook is not docs/operating.md#<section>"
        assert runbook[1] in sections, f"{rule['alert']}: docs/operating.md has no section #{runbook[1]}"
        assert "for" in rule, f"{rule['alert']}: no `for:`"


def test_the_series_an_expression_reads_are_told_from_its_functions_labels_and_ranges():
    expr = (
        'sum by (reason) (rate(webhook_front_refusals_total{reason=~"a|b"}[5m]))'
        " > 0.1 * (sum(rate(webhook_deliveries_total[$__rate_interval])) or vector(0))"
        " and histogram_quantile(0.9, sum by (le) (rate(webhook_delivery_duration_seconds_bucket[5m])))"
        ' and up{job="webhooks"} == 0'
    )
    assert metric_names(expr) == {
        "webhook_front_refusals_total",
        "webhook_deliveries_total",
        "webhook_delivery_duration_seconds_bucket",
        "up",
    }


def test_ci_installs_prometheus_and_fails_without_it():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "missing+=(prometheus)" in ci
    assert "WEBHOOKS_REQUIRE_PROMTOOL=1" in ci
