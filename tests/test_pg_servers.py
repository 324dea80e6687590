"""tests/support/pg_servers.py starts what the failover and partition tests rely on."""

from __future__ import annotations

import time

import psycopg
import pytest

from tests.support import pg_servers
from tests.support.downstream import wait_until
from tests.support.pg_servers import Cluster, multi_host_url
from tests.support.rows import count_rows

# PostgreSQL servers of its own, started as the postgres user (root).
pytestmark = pytest.mark.system


@pytest.fixture
def cluster():
    pg_servers.require()
    with Cluster() as cluster:
        yield cluster


def test_a_replica_streams_the_primarys_commits_and_takes_writes_once_promoted(cluster):
    primary = cluster.primary()
    replica = cluster.replica(primary)
    with primary.connect() as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")
    with replica.connect() as conn:
        wait_until(
            lambda: conn.execute("SELECT to_regclass('t') IS NOT NULL").fetchone()[0], 10, "t replicated"
        )
        assert replica.in_recovery()
    primary.kill()
    assert not primary.running()
    replica.promote()
    assert not replica.in_recovery()
    with replica.connect() as conn:
        conn.execute("INSERT INTO t VALUES (2)")


def test_a_multi_host_url_reaches_the_writable_server_whichever_is_first(cluster):
    primary = cluster.primary()
    replica = cluster.replica(primary)
    url = multi_host_url([replica, primary], target_session_attrs="read-write", connect_timeout=2)
    with psycopg.connect(url) as conn:
        assert conn.info.port == primary.port


def test_a_synchronous_standby_has_every_commit_the_primary_acknowledged(cluster):
    primary = cluster.primary()
    replica = cluster.replica(primary, synchronous="remote_apply")
    with primary.connect() as conn:
        assert conn.execute("SHOW synchronous_standby_names").fetchone()[0] == "replica"
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t SELECT generate_series(1, 100)")
    # remote_apply: acknowledged means visible on the standby, with no wait.
    with replica.connect() as conn:
        assert count_rows(conn, "t") == 100


def test_a_replica_behind_a_link_sees_a_commit_no_sooner_than_the_delay(cluster):
    primary = cluster.primary()
    replica = cluster.replica(primary, link_delay_s=0.2)
    with primary.connect() as conn:
        conn.execute("CREATE TABLE t (x int)")
    pg_servers.wait_replayed(primary, replica)
    with primary.connect() as conn, replica.connect() as standby:
        conn.execute("INSERT INTO t VALUES (1)")
        committed = time.monotonic()
        assert count_rows(standby, "t") == 0
        wait_until(lambda: count_rows(standby, "t") == 1, 10, "the row replicated")
        assert time.monotonic() - committed >= 0.2
