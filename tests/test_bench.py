"""The benchmark's database ceiling replays what the service really writes."""
from bench import pgbench


def test_pgbench_script_repeats_the_services_transactions_for_new_payments(database_url, db):
    outcome = pgbench.run(database_url, clients=2, seconds=2)
    assert outcome.deliveries_per_s > 0
    # The floor's database half: read from pgbench's own backends while they ran.
    assert outcome.postgres_cpu_us > 0
    outcomes = dict(db.execute(
        "SELECT outcome, count(*) FROM webhook_events WHERE status = 'completed' GROUP BY 1"
    ).fetchall())
    # Every run of the script is one more payment: its session fulfils it,
    # its payment intent finds it fulfilled, its charge has no handler.
    payments = outcomes["fulfilled"]
    assert payments > 1
    assert outcomes == {"fulfilled": payments, "already_fulfilled": payments, "ignored": payments}
    assert db.execute("SELECT count(*) FROM webhook_events").fetchone()[0] == 3 * payments
    assert db.execute(
        "SELECT count(*), count(DISTINCT payment_id) FROM fulfilments"
    ).fetchone() == (payments, payments)
