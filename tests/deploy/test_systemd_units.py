"""deploy/systemd: a unit for each Procfile line, verified by systemd, run as docs/serving.md says.

`systemd-analyze verify` (Debian's `systemd` package) checks each unit as
systemd would load it, with the install folder /opt/webhooks taken to be
this checkout, so the interpreter each one starts must exist. Without it the
check skips, visibly; CI installs it and sets WEBHOOKS_REQUIRE_SYSTEMD=1.
"""

import shlex
from collections import defaultdict
from pathlib import Path

from tests.conftest import ROOT
from tests.deploy.shipped import SYSTEMD, run, tool
from webhooks.commands import build_parser
from webhooks.commands.prune import PROVIDER_RETRY_HORIZON
from webhooks.infra.config import Settings

INSTALLED = "/opt/webhooks"
# Each Procfile line's unit.
UNITS = {"release": "webhooks-migrate", "web": "webhooks-serve", "worker": "webhooks-worker"}
# Units a timer of the same name starts, not a Procfile line.
TIMED = ("webhooks-prune",)


def unit(name: str, kind: str = "service") -> dict[str, list[str]]:
    """`Key` → its values, in order, over every section (a key may repeat)."""
    values = defaultdict(list)
    for line in (SYSTEMD / f"{name}.{kind}").read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            values[key].append(value)
    return values


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines if line.strip())


def test_systemd_verifies_every_unit(tmp_path: Path):
    analyze = tool("systemd-analyze", "systemd", "WEBHOOKS_REQUIRE_SYSTEMD")
    for shipped in SYSTEMD.glob("*.*"):
        (tmp_path / shipped.name).write_text(shipped.read_text().replace(INSTALLED, str(ROOT)))
    verified = run([analyze, "verify", *sorted(str(path) for path in tmp_path.iterdir())])
    # A setting systemd cannot parse is only a warning, so any output is a failure.
    assert (verified.returncode, verified.stdout + verified.stderr) == (0, "")


def test_each_procfile_line_has_a_unit_running_its_command():
    assert set(procfile()) == set(UNITS)
    for process, command in procfile().items():
        (start,) = unit(UNITS[process])["ExecStart"]
        interpreter, *args = shlex.split(start)
        assert interpreter == f"{INSTALLED}/.venv/bin/python", UNITS[process]
        assert ["python", *args] == shlex.split(command), UNITS[process]
        assert unit(UNITS[process])["WorkingDirectory"] == [INSTALLED]
    assert {path.stem for path in SYSTEMD.glob("*.service")} == {*UNITS.values(), *TIMED}
    assert {path.stem for path in SYSTEMD.glob("*.timer")} == set(TIMED)


def test_serve_starts_as_root_to_drop_privileges_itself_and_the_others_run_as_the_service_user():
    serve = unit("webhooks-serve")
    # serve's own user switch (docs/serving.md, "Who runs as whom") needs root.
    assert "User" not in serve
    # TERM to serve alone, which stops nginx gracefully before gunicorn.
    assert serve["KillMode"] == ["mixed"]
    for name in ("webhooks-worker", "webhooks-migrate", *TIMED):
        assert unit(name)["User"] == [Settings().service_user], name
        assert unit(name)["CapabilityBoundingSet"] == [""], name


def test_every_unit_reads_the_environment_file_and_gains_no_privilege():
    for name in (*UNITS.values(), *TIMED):
        settings = unit(name)
        assert settings["EnvironmentFile"] == ["/etc/webhooks/webhooks.env"], name
        assert settings["NoNewPrivileges"] == ["yes"], name
        assert settings["ProtectSystem"] in (["full"], ["strict"]), name
        assert "webhooks-migrate.service" in settings["After"] or name == "webhooks-migrate"
    for name in ("webhooks-serve", "webhooks-worker"):
        assert unit(name)["Restart"] == ["on-failure"], name


def test_retention_runs_daily_as_a_prune_the_project_parses_and_a_missed_day_runs_at_boot():
    timer, service = unit("webhooks-prune", "timer"), unit("webhooks-prune")
    assert timer["OnCalendar"] == ["daily"]
    # A host that was down runs the missed day's prune when it is back, not a month later.
    assert timer["Persistent"] == ["true"]
    assert service["Type"] == ["oneshot"]
    (start,) = service["ExecStart"]
    interpreter, *args = shlex.split(start)
    assert interpreter == f"{INSTALLED}/.venv/bin/python"
    assert args[:3] == ["-m", "webhooks", "prune"]
    # Parsed as the command would parse it: a flag renamed in prune fails here, not at 3 a.m.
    parsed = build_parser("prune").parse_args(args[2:])
    assert parsed.older_than >= PROVIDER_RETRY_HORIZON
    assert not parsed.force


def test_ci_installs_systemd_and_fails_without_it():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "missing+=(systemd)" in ci
    assert "WEBHOOKS_REQUIRE_SYSTEMD=1" in ci
