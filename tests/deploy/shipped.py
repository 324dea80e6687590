"""What tests/deploy checks: the shipped files, and the tools that check them, run or skipped visibly."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "tests" / "deploy" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "webhooks-dashboard.json"
SYSTEMD = ROOT / "deploy" / "systemd"

# Series Prometheus makes itself for every target, not read from /metrics.
PROMETHEUS_OWN = {"up"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset"}


def tool(name: str, package: str, require: str) -> str:
    """The tool's path; skips without it, and fails instead where `require` is set (CI sets it)."""
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"]))
    if found:
        return found
    message = f"{name} not found: apt-get install {package} (.ci/run does) to check the shipped files"
    if os.environ.get(require):
        pytest.fail(message)
    pytest.skip(message)


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def metric_names(expr: str) -> set[str]:
    """The series a PromQL expression reads: not its functions, label names, strings or ranges."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set(re.findall(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr))
    return names - _KEYWORDS
