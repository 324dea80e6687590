"""Real PostgreSQL 15 servers for tests: a primary, streaming replicas, kills and promotions.

The machine's Debian binaries (initdb, pg_ctl, pg_basebackup), run as the
`postgres` user, each server in a data folder of its own under one temporary
folder, on a free port, listening where the caller says (the partition tests
put one side of a veth pair there). Everything is trust-authenticated: the
servers live only as long as the test.

    with Cluster() as cluster:
        primary = cluster.primary()
        replica = cluster.replica(primary, synchronous="remote_apply")
        url = multi_host_url([primary, replica], target_session_attrs="read-write")
        primary.kill()       # pg_ctl stop -m immediate
        replica.promote()
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support.downstream import wait_until
from tests.support.ports import free_port

BIN = Path(os.environ.get("WEBHOOKS_PG_BIN", "/usr/lib/postgresql/15/bin"))
USER = "postgres"
# A pg_ctl or pg_basebackup that takes longer than this is stuck, not slow.
COMMAND_TIMEOUT_S = 120
# Each server's settings beside the caller's. An immediate stop kills the
# processes, not the machine: written WAL survives in the page cache, so
# fsync would only cost time here and change nothing the tests measure.
BASE_SETTINGS = {
    "fsync": "off",
    "max_connections": "100",
    "wal_level": "replica",
    "max_wal_senders": "10",
    "hot_standby": "on",
    "logging_collector": "off",
}


def unavailable() -> str | None:
    """Why real servers cannot be started here, or None."""
    missing = [name for name in ("initdb", "pg_ctl", "pg_basebackup") if not (BIN / name).exists()]
    if missing:
        return (
            f"PostgreSQL 15 binaries not found in {BIN} ({', '.join(missing)}): apt-get install postgresql-15"
        )
    if os.geteuid() != 0:
        return "starting PostgreSQL servers as the postgres user needs root (runuser)"
    if shutil.which("runuser") is None:
        return "runuser not found (util-linux)"
    try:
        import pwd

        pwd.getpwnam(USER)
    except KeyError:
        return f"no {USER} user on this machine"
    return None


def require() -> None:
    """Skip the calling test, naming what is missing, where servers cannot be started
    (fail instead under WEBHOOKS_REQUIRE_PG_SERVERS, as in CI)."""
    from tests.support import machine

    machine.require("WEBHOOKS_REQUIRE_PG_SERVERS", unavailable())


def _as_postgres(*args: str | Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["runuser", "-u", USER, "--", *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{Path(str(args[0])).name} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


class Server:
    """One PostgreSQL server: its data folder, port and the address clients use."""

    def __init__(self, name: str, data: Path, port: int, host: str):
        self.name = name
        self.data = data
        self.port = port
        self.host = host
        self.log = data.parent / f"{name}.log"
        self.link: Link | None = None  # a replica's way to its primary, when not direct

    def url(self, dbname: str = "postgres", host: str | None = None, **params) -> str:
        return make_conninfo("", host=host or self.host, port=self.port, user=USER, dbname=dbname, **params)

    def connect(self, dbname: str = "postgres", **params) -> psycopg.Connection:
        return psycopg.connect(self.url(dbname, connect_timeout=5, **params), autocommit=True)

    def pg_ctl(self, *args: str) -> None:
        _as_postgres(BIN / "pg_ctl", "-D", self.data, "-w", "-t", str(COMMAND_TIMEOUT_S), *args)

    def start(self) -> None:
        self.pg_ctl("-l", str(self.log), "start")

    def stop(self) -> None:
        """A clean shutdown: in-flight transactions rolled back, every commit kept."""
        self.pg_ctl("-m", "fast", "stop")

    def kill(self) -> float:
        """`pg_ctl stop -m immediate`, a crash as far as clients and replicas can tell.

        Returns time.monotonic() once the server is gone (pg_ctl waits for
        that): every answer before it came from this server.
        """
        self.pg_ctl("-m", "immediate", "stop")
        return time.monotonic()

    def promote(self) -> None:
        """A standby becomes a primary (pg_ctl promote waits until it accepts writes)."""
        self.pg_ctl("promote")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def in_recovery(self) -> bool:
        with self.connect() as conn:
            return conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]

    def set(self, **settings: str) -> None:
        """ALTER SYSTEM each setting and reload: for settings that need no restart."""
        with self.connect() as conn:
            for name, value in settings.items():
                # ALTER SYSTEM takes no parameters: the name and value are quoted here.
                conn.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
                )
            conn.execute("SELECT pg_reload_conf()")

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


_fresh: Path | None = None


def _initialised(data: Path) -> None:
    """`data` as initdb leaves it: a copy of one initdb'd folder per process, since every
    fresh cluster is the same files and copying them takes a fraction of initdb's time."""
    global _fresh
    if _fresh is None:
        root = Path(tempfile.mkdtemp(prefix="webhooks-pginit-"))
        shutil.chown(root, USER, USER)
        _as_postgres(
            BIN / "initdb", "-D", root / "data", "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        _fresh = root / "data"
    # As root, with owners and modes kept: the postgres user's own folder, as initdb made it.
    subprocess.run(["cp", "-a", str(_fresh), str(data)], check=True, capture_output=True)


class Cluster:
    """Servers in one temporary folder; every one of them stopped and removed on exit."""

    def __init__(self, listen_addresses: str = "127.0.0.1", trusted_subnets: tuple[str, ...] = ()):
        self.listen_addresses = listen_addresses
        self.trusted_subnets = trusted_subnets
        self.root = Path(tempfile.mkdtemp(prefix="webhooks-pgcluster-"))
        shutil.chown(self.root, USER, USER)
        self.servers: list[Server] = []

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def _server(self, name: str, host: str | None) -> Server:
        server = Server(name, self.root / name, free_port(), host or self.listen_addresses.split(",")[0])
        self.servers.append(server)
        return server

    def primary(self, name: str = "primary", host: str | None = None, **settings: str) -> Server:
        """initdb and start a primary. `settings` go into its postgresql.conf."""
        server = self._server(name, host)
        _initialised(server.data)
        self._configure(server, settings)
        self._trust_subnets(server)
        server.start()
        return server

    def replica(
        self,
        primary: Server,
        name: str = "replica",
        synchronous: str | None = None,
        host: str | None = None,
        link_delay_s: float | None = None,
        **settings: str,
    ) -> Server:
        """A streaming replica of `primary` (pg_basebackup -R), started and streaming.

        With `synchronous` ("on" or "remote_apply"), it becomes the primary's
        synchronous standby: the primary's commits wait for it. With
        `link_delay_s`, it streams through a `Link` that far behind.
        """
        server = self._server(name, host)
        port = primary.port
        if link_delay_s is not None:
            server.link = Link(primary.host, primary.port, link_delay_s)
            port = server.link.port
        source = f"host={primary.host} port={port} user={USER} application_name={name}"
        _as_postgres(
            BIN / "pg_basebackup",
            "-D",
            server.data,
            "-d",
            source,
            "-R",
            "-X",
            "stream",
            "--no-sync",
            "-c",
            "fast",
        )
        self._configure(server, settings)
        server.start()
        if synchronous:
            primary.set(synchronous_standby_names=name, synchronous_commit=synchronous)
        wait_streaming(primary, name, synchronous=bool(synchronous))
        return server

    def _configure(self, server: Server, settings: dict[str, str]) -> None:
        all_settings = {
            **BASE_SETTINGS,
            "port": str(server.port),
            "listen_addresses": self.listen_addresses,
            "unix_socket_directories": str(server.data),
            **settings,
        }
        lines = [f"{name} = '{value}'" for name, value in all_settings.items()]
        with (server.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/support/pg_servers.py\n" + "\n".join(lines) + "\n")

    def _trust_subnets(self, server: Server) -> None:
        lines = [
            f"host {db} all {subnet} trust"
            for subnet in self.trusted_subnets
            for db in ("all", "replication")
        ]
        if lines:
            with (server.data / "pg_hba.conf").open("a") as hba:
                hba.write("\n".join(lines) + "\n")

    def cleanup(self) -> None:
        for server in self.servers:
            if server.link:
                server.link.close()
            if server.running():
                try:
                    server.kill()
                except RuntimeError:
                    pass  # already gone: its pid file outlived it
        shutil.rmtree(self.root, ignore_errors=True)


class Link:
    """A TCP relay standing for the network between a replica and its primary's machine.

    What either side sends arrives `delay_s` later, as over a long or busy
    link. When the primary's side closes (its server was killed), whatever
    was still on its way is dropped, as it is when the machine itself dies:
    a server killed on this machine would otherwise still deliver its last
    WAL from the kernel's buffers, which a crashed machine does not.
    """

    def __init__(self, host: str, port: int, delay_s: float):
        self._upstream = (host, port)
        self.delay_s = delay_s
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                replica, _ = self._listener.accept()
                primary = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                continue  # the listener closed, or the primary is gone: the replica retries
            primary.settimeout(None)
            for sock in (replica, primary):
                # As PostgreSQL's own sockets: Nagle with delayed ACKs would stall every small write.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [replica, primary]
            primary_gone = threading.Event()
            self._pipe(primary, replica, primary_gone, from_primary=True)
            self._pipe(replica, primary, primary_gone, from_primary=False)

    def _pipe(
        self, source: socket.socket, target: socket.socket, primary_gone: threading.Event, from_primary: bool
    ) -> None:
        chunks: queue.Queue[tuple[float, bytes] | None] = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    if from_primary:
                        primary_gone.set()  # what is still in flight dies with it
                    chunks.put(None)
                    return
                chunks.put((time.monotonic() + self.delay_s, data))

        def write() -> None:
            while (chunk := chunks.get()) is not None and not primary_gone.is_set():
                due, data = chunk
                time.sleep(max(0.0, due - time.monotonic()))
                if primary_gone.is_set():
                    break
                try:
                    target.sendall(data)
                except OSError:
                    break
            _close(target)

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        for sock in [self._listener, *self._sockets]:
            _close(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected, or already shut
    sock.close()


def wait_streaming(primary: Server, standby: str, synchronous: bool = False, timeout: float = 30.0) -> None:
    """Until `primary` streams to `standby` (as its synchronous standby, if asked)."""
    wanted = ("sync",) if synchronous else ("async", "sync", "potential", "quorum")
    with primary.connect() as conn:

        def streaming() -> bool:
            row = conn.execute(
                "SELECT sync_state FROM pg_stat_replication "
                "WHERE application_name = %s AND state = 'streaming'",
                [standby],
            ).fetchone()
            return bool(row) and row[0] in wanted

        wait_until(streaming, timeout, f"{standby} streaming from {primary.name} ({'/'.join(wanted)})")


def wait_replayed(primary: Server, standby: Server, timeout: float = 30.0) -> None:
    """Until `standby` has replayed everything `primary` has written so far."""
    with primary.connect() as conn:
        (lsn,) = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    with standby.connect() as conn:
        wait_until(
            lambda: conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [lsn]).fetchone()[0],
            timeout,
            f"{standby.name} replaying {primary.name}'s WAL up to {lsn}",
        )


def multi_host_url(servers: list[Server], dbname: str = "postgres", **params) -> str:
    """One libpq conninfo naming every server, in order (`host=a,b port=p,q`).

    libpq tries them in turn; with target_session_attrs=read-write it keeps
    the first that accepts writes, which is how a client finds the new
    primary after a failover.
    """
    return make_conninfo(
        "",
        host=",".join(s.host for s in servers),
        port=",".join(str(s.port) for s in servers),
        user=USER,
        dbname=dbname,
        **params,
    )
