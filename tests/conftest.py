"""Fixtures: a real PostgreSQL, a migrated database per test, the app, a real gunicorn."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import requests
import structlog
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support import connections, databases, machine, ports, properties, reliability, senders, storm
from tests.support.rows import count_rows
from webhooks.infra import embedded, migrate, privilege
from webhooks.infra.config import SettingError, Settings, serving
from webhooks.providers import stripe as stripe_wire
from webhooks.traffic import samples
from webhooks.web.app import create_app

ROOT = Path(__file__).resolve().parent.parent
SECRET = "whsec_test_primary_0123456789"
OTHER_SECRET = "whsec_test_secondary_9876543210"
LOCAL_SERVER = "postgresql://root@127.0.0.1:5432/test"


def _reachable(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=3).close()
        return True
    except psycopg.OperationalError:
        return False


# What a test needs that a developer's machine may lack: nginx in front, a
# browser, a PostgreSQL of its own. Such tests are `system` tests (so are the
# ones that need root, ip netns or PostgreSQL servers of their own, marked where
# they are written): `pytest -m "not system"` is the quick loop, CI runs all.
SYSTEM_FIXTURES = {"front", "chromium", "private_server"}


# A file where the parallel pass writes how many tests the same arguments select for each later
# pass: bin/test starts a pass, and its workers, only where there are tests for them.
SYSTEM_SELECTED = "WEBHOOKS_SYSTEM_SELECTED"
# bin/test's passes, in their order (docs/testing.md).
PASSES = ("parallel", "system", "alone")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pass",
        dest="suite_pass",
        choices=PASSES,
        help="bin/test's passes: `parallel` runs all but the system and `alone` tests (with xdist's -n), "
        "`system` the system tests a few side by side (they take root, hosts and ports of the machine), "
        "`alone` the tests that must have the machine to themselves, one after another",
    )


def _pass_of(item: pytest.Item) -> str:
    if item.get_closest_marker("alone") is not None:
        return "alone"
    return "system" if item.get_closest_marker("system") is not None else "parallel"


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    """The `system` marks before `-m` selects by them; the pass after `-m` and `-k`, so that
    the later passes' counts are of what the arguments select."""
    for item in items:
        if SYSTEM_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.system)
    yield
    _select_the_pass(config, items)


def _select_the_pass(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = config.getoption("suite_pass")
    if chosen is None:
        return
    selected: dict[str, list[pytest.Item]] = {name: [] for name in PASSES}
    for item in items:
        selected[_pass_of(item)].append(item)
    left = [item for name in PASSES if name != chosen for item in selected[name]]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = selected[chosen]
    # Under `--dist loadfile --no-loadscope-reorder` a worker takes the modules in this order.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
    if chosen == "parallel" and os.environ.get(SYSTEM_SELECTED):
        counted = ROOT / os.environ[SYSTEM_SELECTED]
        counted.parent.mkdir(exist_ok=True)
        counted.write_text(f"{len(selected['system'])} {len(selected['alone'])}\n")


# make_app's pool: a connection per sender of the largest thread storm, and a few more.
STORM_POOL = 40


def _free_connections() -> int:
    """The connections the server has left for this run."""
    url = os.environ.get("DATABASE_URL") or LOCAL_SERVER
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            (free,) = conn.execute(
                "SELECT current_setting('max_connections')::int"
                " - current_setting('superuser_reserved_connections')::int"
                " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
            ).fetchone()
    except psycopg.OperationalError:
        free = 100  # the embedded server: PostgreSQL's default
    return free


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: as many workers as the server's free connections hold (tests/support/connections.py)."""
    return connections.workers(_free_connections(), os.cpu_count() or 1)


def pytest_configure_node(node) -> None:
    """xdist's controller tells each worker what the run's workers share, counted before any starts,
    and the folder of its locks, which the controller removes at the end."""
    config = node.config
    if not hasattr(config, "webhooks_connections"):
        locks = tempfile.mkdtemp(prefix="webhooks-test-connections-")
        config.webhooks_connections = (_free_connections(), locks)
    node.workerinput["webhooks_connections"] = config.webhooks_connections


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        free, folder = workerinput["webhooks_connections"]
        connections.configure(Path(folder), free, int(workerinput["workercount"]))


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "webhooks_connections"):  # xdist's controller, its workers gone
        shutil.rmtree(config.webhooks_connections[1], ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    try:
        return (yield)
    finally:
        connections.test_ended()


properties.load()


def _uncached(configure):
    def configure_uncached(**settings):
        configure(**{**settings, "cache_logger_on_first_use": False})

    return configure_uncached


# A test process makes apps and calls commands many times, each configuring the logs for
# the stdout of its moment (a test's capture): a logger cached on first use would keep the first.
structlog.configure = _uncached(structlog.configure)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    machine.running = item


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, a folder for the run's workers to take turns in (machine.turn), removed after."""
    if hasattr(config, "workerinput"):
        return  # a worker: its controller's folder, from the environment
    os.environ.pop(machine.TURNS, None)  # an enclosing run's, where a test runs pytest
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
        folder = tempfile.mkdtemp(prefix="webhooks-turns-")
        os.environ[machine.TURNS] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A test marked `alone` runs with no other worker's test beside it (machine.turn)."""
    with machine.turn(alone=item.get_closest_marker("alone") is not None):
        return (yield)


@pytest.fixture(scope="session", autouse=True)
def installed() -> None:
    """As root, what `python -m webhooks install` makes for every start (the service's users, Python's
    path open to them), as on a machine it ran on: `serve` started as root only checks it."""
    if privilege.as_root():
        privilege.open_import_path(privilege.make_accounts(Settings())[0])


@pytest.fixture(scope="session")
def server_url() -> str:
    """DATABASE_URL, else the machine's server, else an embedded one."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    if _reachable(LOCAL_SERVER):
        return LOCAL_SERVER
    return embedded.url(ROOT / ".data" / "pg-test")


@contextlib.contextmanager
def migrated_schema(server_url: str, directory: Path = migrate.MIGRATIONS_DIR):
    """A libpq conninfo whose search_path is a migrated schema made for the caller alone."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    options = conninfo_to_dict(server_url).get("options", "")
    url = make_conninfo(server_url, options=f"{options} -c search_path={schema}".strip())
    # Only part of the history: the rule definitions need all of it (the test migrates the rest).
    migrate.migrate(url, directory, rules=None if directory == migrate.MIGRATIONS_DIR else {})
    try:
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextlib.contextmanager
def migrated_before(server_url: str, version: str, folder: Path):
    """A migrated_schema with only the migrations older than `version` (copied into `folder`)."""
    for path in migrate.available():
        if path.stem < version:
            shutil.copy(path, folder / path.name)
    with migrated_schema(server_url, folder) as url:
        yield url


@pytest.fixture(scope="session")
def template(server_url: str):
    """The run's migrated template database (tests/support/databases.py)."""
    made = databases.Template(server_url)
    yield made
    made.release()


@pytest.fixture
def database_url(template: databases.Template):
    """A migrated database of this test's own: a copy of the run's template."""
    with template.copy() as url:
        yield url


@pytest.fixture(scope="session")
def private_server():
    """A PostgreSQL of this run's own, for faults that must not touch a shared server."""
    import pgserver  # its bundled binaries, whatever the machine has

    server = pgserver.get_server(tempfile.mkdtemp(prefix="webhooks-pg-"), cleanup_mode="delete")
    if privilege.as_root():
        # Its socket is in its folder, as the embedded server's: gunicorn's workers reach it alike.
        embedded.admit(Path(server.pgdata), privilege.service_account(Settings()))
    yield server
    # The fault tests restart it with pg_ctl, and pgserver's cleanup stops only the postmaster it
    # started: it would remove the folder under a server still running.
    embedded.stop(Path(server.pgdata))
    server.cleanup()


@pytest.fixture
def data_dir():
    """WEBHOOK_DATA_DIR relative to the project root, as a user would set it; stopped and removed after."""
    relative = f".data/test-{uuid.uuid4().hex[:8]}"
    yield relative
    embedded.stop(embedded.pgdata(relative))
    subprocess.run(["rm", "-rf", str(ROOT / relative)], check=True)


@pytest.fixture
def db(database_url: str):
    """An autocommit connection for assertions, outside the service's pool."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


def terminate_backends(db, app_name: str) -> int:
    """End every session with this application_name (a test's own), as a failover or restart would."""
    return db.execute(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
        [app_name],
    ).fetchone()[0]


def service_env(database_url: str, **extra) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "STRIPE_WEBHOOK_SECRET": f"{SECRET},{OTHER_SECRET}",
        **{sender.setting: f"{sender.secret},{sender.other_secret}" for sender in senders.SENDERS},
        "WEBHOOK_HANDLER_MODULES": "tests.support.handlers",
        **{k: str(v) for k, v in extra.items()},
    }


@pytest.fixture
def make_app(database_url: str):
    apps = []

    def make(**extra):
        # Pool sized for the thread storms: each thread needs its own connection.
        env = service_env(database_url, WEBHOOK_POOL_MAX_SIZE=STORM_POOL, **extra)
        app = create_app(Settings.from_env(env))
        apps.append(app)
        if "DATABASE_URL" not in extra:
            # Its first connection made now: on a loaded machine, one made by the first
            # request could take longer than the pool's wait and answer 503.
            pool = app.extensions["webhooks.pool"].get()
            pool.wait(timeout=30)
            storm.apps_pools.append(pool)
        return app

    yield make
    storm.apps_pools.clear()
    for app in apps:
        app.extensions["webhooks.pool"].close()


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


def signed_headers(body: bytes, secret: str = SECRET, timestamp: int | None = None) -> dict:
    return {
        "Stripe-Signature": stripe_wire.sign(body, secret, timestamp),
        "Content-Type": "application/json; charset=utf-8",
    }


def post_event(client, evt: dict | bytes, **sign_kwargs):
    body = evt if isinstance(evt, bytes) else samples.encode(evt)
    return client.post("/webhooks/stripe", data=body, headers=signed_headers(body, **sign_kwargs))


def until_answered(app, evt: dict, tries: int = 50) -> str:
    """Deliver as Stripe does: a 409 (the event or its payment busy elsewhere) is retried; the outcome."""
    for _ in range(tries):
        response = post_event(app.test_client(), evt)
        if response.status_code != 409:
            assert response.status_code == 200, response.get_json()
            return response.get_json()["outcome"]
    raise AssertionError(f"still 409 after {tries} tries")


def scripted_event(**script) -> dict:
    return samples.event("test.scripted", {"id": samples.stripe_id("obj"), **script})


def table_counts(db) -> dict[str, int]:
    return {table: count_rows(db, table) for table in ("webhook_events", "webhook_failures", "fulfilments")}


class Gunicorn:
    """gunicorn.conf.py serving the app on free loopback ports: alone, as on a
    platform whose router buffers requests, or `command` (`python -m webhooks
    serve`, bin/serve) with nginx in front of it."""

    def __init__(
        self,
        env: dict[str, str],
        command: list[str] | None = None,
        host: str = "127.0.0.1",
        inside: Callable[[list[str]], list[str]] = list,
        probe: Callable[[Gunicorn], str] = lambda server: server.url + "/readyz",
    ):
        """`host`: where it listens; `inside`: wraps its command line (`ip netns exec`, say);
        `probe`: the URL that answers 200 once it is ready."""
        self.port = ports.free_port()
        self.url = f"http://{host}:{self.port}"
        self.metrics_port = ports.free_port()
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.admin_port = ports.free_port()
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"
        self._probe = probe(self)
        self.workers = int(env.get("WEB_CONCURRENCY", 1))
        self.log_path = Path(tempfile.mkdtemp()) / "gunicorn.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            inside(
                [*command, "--port", str(self.port)]
                if command
                else [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"]
            ),
            cwd=ROOT,
            env={
                **os.environ,
                "HOST": host,
                **env,
                "PORT": str(self.port),
                "METRICS_PORT": str(self.metrics_port),
                "ADMIN_PORT": str(self.admin_port),
            },
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()  # no fixture holds it yet to stop it
            raise

    def _wait_ready(self, timeout: float = 60.0) -> None:
        """Until /readyz answers and every worker has loaded the app.

        One ready worker is not enough: a race test against a single booted
        worker would serialise its senders and prove nothing.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            try:
                ready = requests.get(self._probe, timeout=5).status_code == 200
                if ready and self.output().count('"event":"app_ready"') >= self.workers:
                    return
            except requests.RequestException:
                pass  # not listening yet, or a worker still booting or opening its pool
            time.sleep(0.1)
        raise TimeoutError(self.output())

    def output(self) -> str:
        return self.log_path.read_text()

    def stop(self, quick: bool = False) -> None:
        """As an operator stops it (SIGTERM: each worker finishes its requests and waits out its idle
        keep-alive connections), or `quick` (SIGQUIT), as a fixture does after its test."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if quick else signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.log.close()


def _most_connections(env: dict[str, str]) -> int:
    """What a gunicorn on `env` may hold at once: each worker's pool full, as a storm through it leaves it."""
    try:
        settings, process = serving(env)
    except SettingError:
        return 0  # it stops at its start
    return process.workers * settings.pool_max_size


@contextlib.contextmanager
def _gunicorns(database_url: str, workers: int):
    with contextlib.ExitStack() as servers:

        def start(**extra) -> Gunicorn:
            env = service_env(database_url, **{"WEB_CONCURRENCY": workers, **extra})
            servers.enter_context(connections.held(_most_connections(env)))
            server = Gunicorn(env)
            servers.callback(server.stop, quick=True)
            return server

        yield start


@pytest.fixture
def gunicorn(database_url: str):
    """`gunicorn(**settings)`: a gunicorn on this test's database, stopped after the test. Two
    workers unless `WEB_CONCURRENCY` says otherwise: deliveries still meet in more than one
    process, and each worker's start (the whole app imported) is most of a boot's time."""
    with _gunicorns(database_url, workers=2) as start:
        yield start


@pytest.fixture(scope="module")
def module_database_url(template: databases.Template):
    """One database for a module's tests that share one server: each leaves rows the next sees."""
    with template.copy() as url:
        yield url


@pytest.fixture(scope="module")
def module_gunicorn(module_database_url: str):
    """One 4-worker gunicorn for a module, on module_database_url, for the tests that do not
    stop it or change its settings: a boot is most of such a test's time. Four workers: a storm
    through it keeps each busy."""
    with _gunicorns(module_database_url, workers=4) as start:
        yield start()


@pytest.fixture
def module_db(module_database_url: str):
    """An autocommit connection to module_database_url."""
    with psycopg.connect(module_database_url, autocommit=True) as conn:
        yield conn


SERVE = [sys.executable, "-m", "webhooks", "serve"]


def require_front() -> None:
    """Skip (fail under WEBHOOKS_REQUIRE_FRONT, as in CI) where nginx is not installed."""
    from webhooks.commands.serve import nginx_binary
    from webhooks.web.front import INSTALL

    missing = f"nginx not found: {INSTALL} (.ci/run does) to test the service through its front"
    machine.require("WEBHOOKS_REQUIRE_FRONT", missing if nginx_binary(Settings.from_env()) is None else None)


@pytest.fixture
def workers_tmp(tmp_path: Path):
    """A folder gunicorn's workers may write in: tmp_path, or under root, where they run as the
    service's user and pytest's folders are root's alone, a folder of that user's own."""
    if not privilege.as_root():
        yield tmp_path
        return
    account = privilege.service_account(Settings())
    folder = Path(tempfile.mkdtemp(prefix="webhooks-test-"))
    os.chown(folder, account.uid, account.gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def chromium() -> str:
    """Debian's chromium, or a visible skip (a failure under WEBHOOKS_REQUIRE_BROWSER: CI installs it)."""
    browser = shutil.which("chromium")
    missing = (
        "chromium not found: install Debian's chromium package (.ci/run does) to check /admin in a browser"
    )
    machine.require("WEBHOOKS_REQUIRE_BROWSER", missing if browser is None else None)
    return browser


@pytest.fixture
def front(database_url: str):
    """`python -m webhooks serve` (or `command`): nginx in front of gunicorn, on free ports."""
    require_front()
    servers = []

    def start(command: list[str] = SERVE, **extra) -> Gunicorn:
        server = Gunicorn(service_env(database_url, **{"WEB_CONCURRENCY": 2, **extra}), command)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def load_json(response) -> dict:
    return json.loads(response.data if hasattr(response, "data") else response.content)


@pytest.fixture(scope="session")
def reliability_results():
    return reliability.Results.fresh()


@pytest.fixture
def figures(reliability_results, request):
    """Records this test's measured figures for docs/reliability.md."""
    return reliability_results.for_test(request.node.nodeid)
