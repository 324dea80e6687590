"""deploy/grafana/webhooks-dashboard.json: a dashboard Grafana imports, a panel for each concern.

tests/deploy/test_metric_names.py checks that the metrics its queries read are served.
"""

import json

from tests.deploy.shipped import DASHBOARD, metric_names

# What each of the dashboard's concerns reads.
WATCHED = {
    "deliveries by outcome": "webhook_deliveries_total",
    "latency": "webhook_delivery_duration_seconds_bucket",
    "outbox jobs by status": "webhook_outbox_jobs",
    "oldest outbox job": "webhook_outbox_oldest_age_seconds",
    "front refusals": "webhook_front_refusals_total",
}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries() -> list[str]:
    return [target["expr"] for panel in dashboard()["panels"] for target in panel["targets"]]


def test_every_panel_queries_the_chosen_prometheus_with_a_distinct_id_and_ref():
    board = dashboard()
    assert {"title", "uid", "panels", "schemaVersion"} <= board.keys()
    assert [v["name"] for v in board["templating"]["list"] if v["type"] == "datasource"] == ["datasource"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]


def test_the_dashboard_shows_deliveries_failures_latency_the_outbox_and_the_fronts_refusals():
    read = set().union(*(metric_names(expr) for expr in queries()))
    assert {concern: metric for concern, metric in WATCHED.items() if metric not in read} == {}
    failures = [e for e in queries() if 'status!~"2.."' in e and "/" in e]
    server_errors = [e for e in queries() if 'status=~"5.."' in e and "/" in e]
    assert failures and server_errors, "no failure rate or 5xx rate panel"


def test_no_two_panels_overlap():
    cells = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & mine, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells |= mine
