"""`migrate`: every migration applied once, the SQL rules re-applied from their files.

And when a schema is current.
"""

from webhooks.infra import migrate


def test_a_schema_missing_an_older_migration_is_not_current(db):
    # Files land out of order (0013 and 0014 came after 0020): the newest
    # being applied says nothing of the others.
    db.execute("DELETE FROM schema_migrations WHERE version = '0013_payment_side_object_keys'")
    assert migrate.missing(db) == ["0013_payment_side_object_keys"]
    assert not migrate.is_current(db)


def test_a_database_that_applied_a_migration_since_folded_into_a_rule_file_is_current(database_url, db):
    # 0026 only redefined functions that webhooks/domains/stripe/orders.sql now
    # owns: databases made before the fold still record it, and have no file for it.
    db.execute("INSERT INTO schema_migrations (version) VALUES ('0026_checkout_post_payment_invoices')")
    assert migrate.missing(db) == []
    assert migrate.migrate(database_url) == []
    assert migrate.is_current(db)


def test_every_migrate_reapplies_the_rule_functions_from_their_files(database_url, db):
    db.execute("""CREATE OR REPLACE FUNCTION webhooks_hold_reason(p_payment_id text, p_amount bigint)
                  RETURNS text LANGUAGE sql AS $$ SELECT 'edited by hand' $$""")
    assert migrate.migrate(database_url) == []  # no migration left to apply
    definition = db.execute("SELECT pg_get_functiondef('webhooks_hold_reason'::regproc)").fetchone()[0]
    assert "fraud_warning" in definition and "edited by hand" not in definition


def test_a_rule_file_changed_since_the_last_migrate_leaves_the_schema_not_current_until_migrated(
    database_url, db
):
    changed = {
        **migrate.definitions(),
        "core/ledger.sql": migrate.definitions()["core/ledger.sql"] + "\n-- changed",
    }
    assert migrate.missing(db, rules=changed) == ["core/ledger.sql"]
    migrate.migrate(database_url, rules=changed)
    assert migrate.is_current(db, rules=changed)


def test_the_rule_files_are_the_sql_beside_the_python_that_calls_them():
    assert sorted(migrate.definitions()) == [
        "core/ledger.sql",
        "core/outbox.sql",
        "core/scope.sql",
        "domains/stripe/access.sql",
        "domains/stripe/orders.sql",
        "domains/stripe/payments.sql",
    ]
    assert all("CREATE OR REPLACE FUNCTION" in text for text in migrate.definitions().values())
