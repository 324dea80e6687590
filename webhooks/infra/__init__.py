"""Infrastructure every layer stands on: settings, connections, migrations, logs."""
