"""A fresh clone's first hour: the requirements split, bin/test without a browser, the docs."""

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import ROOT

BROWSER_TEST = "tests/web/test_admin.py::test_headless_chromium_renders_the_page_within_1280_px"
FRONT_TEST = "tests/web/test_front.py::test_an_endless_request_head_is_refused_at_once"


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-r"):
            requirement = Requirement(line)
            assert str(requirement.specifier).startswith("=="), f"{line} is not pinned"
            names.add(normalised(requirement.name))
    return names


def imported_top_level(paths) -> set[str]:
    modules = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"webhooks", "__future__"}


def test_the_runtime_requirements_cover_every_import_of_the_service_and_its_commands():
    runtime = requirement_names(ROOT / "requirements.txt")
    code = [*(ROOT / "webhooks").rglob("*.py"), ROOT / "wsgi.py", ROOT / "gunicorn.conf.py"]
    distributions = importlib.metadata.packages_distributions()
    missing = {
        module: distributions.get(module)
        for module in imported_top_level(code)
        if not {normalised(d) for d in distributions.get(module, [])} & runtime
    }
    assert not missing, f"imported at run time but not in requirements.txt: {missing}"


def test_the_development_requirements_add_pinned_tools_to_the_runtime_ones():
    dev = ROOT / "requirements-dev.txt"
    assert "-r requirements.txt" in dev.read_text().splitlines()
    tools = requirement_names(dev)
    assert {"pytest", "hypothesis", "locust"} <= tools
    assert not tools & requirement_names(ROOT / "requirements.txt")


def _path_without_chromium(tmp_path: Path) -> str:
    """A PATH with what bin/test needs and no browser (Debian puts both in /usr/bin)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):
        (bin_dir / tool).symlink_to(f"/usr/bin/{tool}")
    (bin_dir / "python3").symlink_to(sys.executable)
    return str(bin_dir)


def test_bin_test_without_chromium_says_so_and_skips_the_browser_test_visibly(tmp_path):
    # No xdist workers: -n auto would start several for the one test.
    env = {**os.environ, "PATH": _path_without_chromium(tmp_path), "WEBHOOKS_TEST_WORKERS": "0"}
    env.pop("WEBHOOKS_REQUIRE_BROWSER", None)
    ran = subprocess.run(
        [str(ROOT / "bin" / "test"), "-p", "no:cacheprovider", BROWSER_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "bin/test: chromium not found, so the /admin browser test is skipped" in ran.stderr
    assert re.search(r"SKIPPED \[1\] tests/web/test_admin.py:\d+: chromium not found", ran.stdout)


@pytest.mark.parametrize(
    "selection, code",
    [
        # The parallel pass runs it, the later passes find nothing: a pass.
        ("test_imports_only_go_down_the_layers", 0),
        # No pass runs a test: pytest's "no tests ran" fails bin/test too.
        ("no_such_test", 5),
    ],
)
def test_bin_test_fails_when_no_pass_ran_a_test(tmp_path, selection, code):
    # Where an enclosing bin/test counted the tests it selects for its later passes (one
    # case writes it: the other, on another worker, would race it).
    counts = ROOT / ".data" / "system-tests-selected"
    if code == 0:
        counts.parent.mkdir(exist_ok=True)
        counts.write_text("40 43\n")
    env = {**os.environ, "PATH": _path_without_chromium(tmp_path), "WEBHOOKS_TEST_WORKERS": "0"}
    env.pop("WEBHOOKS_TEST_RUN", None)
    ran = subprocess.run(
        [str(ROOT / "bin" / "test"), "-p", "no:cacheprovider", "tests/test_architecture.py", "-k", selection],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == code, ran.stdout[-2000:] + ran.stderr[-2000:]
    if code == 0:
        # Counted after -k: no later pass starts pytest to find nothing.
        assert "select no system test" in ran.stdout and "select no test that runs alone" in ran.stdout
        # Its own counts (none) in a file of its own: the enclosing run's later passes keep theirs.
        assert counts.read_text() == "40 43\n"
        counts.unlink()


def test_ci_requires_the_browser_so_its_absence_fails_there(tmp_path):
    env = {**os.environ, "PATH": _path_without_chromium(tmp_path), "WEBHOOKS_REQUIRE_BROWSER": "1"}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", BROWSER_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 1 and "Failed: chromium not found" in ran.stdout
    assert "WEBHOOKS_REQUIRE_BROWSER=1" in (ROOT / ".ci" / "run").read_text()


def test_without_nginx_the_front_tests_are_skipped_visibly_and_ci_fails_them():
    env = {**os.environ, "WEBHOOK_NGINX": "no-such-nginx"}
    env.pop("WEBHOOKS_REQUIRE_FRONT", None)
    pytest_run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", FRONT_TEST]
    skipped = subprocess.run(pytest_run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert skipped.returncode == 0 and re.search(r"SKIPPED \[1\] .*nginx not found", skipped.stdout)
    required = subprocess.run(
        pytest_run,
        cwd=ROOT,
        env={**env, "WEBHOOKS_REQUIRE_FRONT": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert required.returncode == 1 and "Failed: nginx not found" in required.stdout
    assert "WEBHOOKS_REQUIRE_FRONT=1" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_links_only_to_files_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert "DESIGN.md" not in readme
    links = re.findall(r"\]\((?!https?://|#)([^)#]+)", readme)
    assert "docs/contract.md" in links
    assert [link for link in links if not (ROOT / link).exists()] == []


def _setup_copy(tmp_path: Path) -> Path:
    """bin/setup in a project of its own, with the files it hashes, and no .venv yet."""
    (tmp_path / "bin").mkdir(parents=True)
    shutil.copy2(ROOT / "bin" / "setup", tmp_path / "bin" / "setup")
    for name in ("requirements.txt", "requirements-dev.txt", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path / "bin" / "setup"


def test_without_python3_venv_bin_setup_names_the_debian_package_in_one_line(tmp_path):
    # Debian's python3 without python3-venv: the venv module is there, ensurepip is not.
    stub = tmp_path / "stub"
    (stub / "ensurepip").mkdir(parents=True)
    (stub / "ensurepip" / "__init__.py").write_text("raise ImportError('ensurepip is not available')\n")
    ran = subprocess.run(
        [str(_setup_copy(tmp_path / "project"))],
        env={**os.environ, "PYTHONPATH": str(stub), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1 and ran.stdout == ""
    [line] = ran.stderr.splitlines()
    assert line.startswith("bin/setup: ") and line.endswith(
        "cannot make a virtual environment: install Debian's python3-venv (apt-get install python3-venv)"
    )
    assert not (tmp_path / "project" / ".venv").exists()


def test_a_current_environment_is_reused_without_a_word():
    if not (ROOT / ".venv" / ".setup-stamp").exists():
        pytest.skip("no .venv made by bin/setup here (bin/test makes it)")
    ran = subprocess.run([str(ROOT / "bin" / "setup"), "--dev"], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "", "")


def test_the_scripts_install_only_into_the_project_environment():
    """pip is run by .venv's python alone: never the system's, nor the one a user has active."""
    scripts = [ROOT / "bin" / name for name in ("setup", "serve", "test")] + [ROOT / ".ci" / "run"]
    installs = [
        (script.name, line.strip())
        for script in scripts
        for line in script.read_text().splitlines()
        if "pip install" in line and not line.lstrip().startswith("#")
    ]
    assert installs and all(line.startswith('"$venv/bin/python" -m pip install') for _, line in installs)
