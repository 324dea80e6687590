"""Every metric the alert rules and the dashboard read is on the /metrics page the service serves.

The page is scraped from `python -m webhooks serve` (nginx in front, as
deployed) after deliveries that make every series the files read appear: a
renamed metric then fails here, not silently in production.
"""

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import front, post_event, signed_headers  # noqa: F401 (fixture)
from tests.deploy.shipped import ALERTS, DASHBOARD, PROMETHEUS_OWN, metric_names
from tests.deploy.test_grafana_dashboard import queries
from webhooks.traffic import samples

# Newer than any version the project knows: applied by its shape, and counted.
FUTURE = "2999-01-01.zinnia"


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def served_names(server) -> set[str]:
    evt = samples.payment_events()[1]
    evt["api_version"] = FUTURE
    body = samples.encode(evt)
    for _ in range(2):  # applied, then replayed: a claim conflict
        answer = requests.post(
            f"{server.url}/webhooks/stripe", data=body, headers=signed_headers(body), timeout=10
        )
        assert answer.status_code == 200, answer.text
    page = requests.get(server.metrics_url, timeout=10)
    assert page.status_code == 200
    return {sample.name for family in text_string_to_metric_families(page.text) for sample in family.samples}


def test_every_metric_the_alerts_and_the_dashboard_read_is_served(front):  # noqa: F811
    served = served_names(front()) | PROMETHEUS_OWN
    assert "webhook_stripe_newer_api_version_events_total" in served
    for source, expressions in ((ALERTS, rule_expressions()), (DASHBOARD, queries())):
        read = set().union(*(metric_names(expr) for expr in expressions))
        assert read - served == set(), f"{source.name} reads metrics /metrics does not serve"
