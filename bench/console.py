"""`python -m bench.console`: the operator console's pages against a backlog of failed events.

Seeds a private schema (bench.servers.private_schema) with `--events`
failed events (a Stripe payment event's payload each, a customer's email in
its metadata), then asks the console for each page as a signed-in script
does, on its own listener, and prints each page's size and median time
beside the budget the console is held to (200 kB, 1 s). DATABASE_URL names
the server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from webhooks.infra.config import Settings
from webhooks.traffic import samples
from webhooks.traffic.report import markdown_table
from webhooks.web import ADMIN, LISTENER
from webhooks.web.app import create_app

from .servers import private_schema

TOKEN = "bench-console-token-0123456789abcdef"
BUDGET_BYTES, BUDGET_S = 200_000, 1.0

_SEED = """
INSERT INTO webhook_failures (provider, event_id, event_type, error_class, error_message, payload, failed_at)
SELECT 'stripe', 'evt_bench_' || n, 'payment_intent.succeeded', 'ScriptedFailure', 'scripted failure 1',
       replace(%(payload)s, 'pi_BENCH', 'pi_bench_' || n), now() - n * interval '1 second'
FROM generate_series(1, %(events)s) AS n
"""


def _payload() -> str:
    evt = samples.payment_events()[1]
    evt["data"]["object"]["id"] = "pi_BENCH"
    evt["data"]["object"]["metadata"] = {"contact": "jane.doe@example.com"}
    return json.dumps(evt)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with private_schema(os.environ["DATABASE_URL"]) as url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_SEED, {"payload": _payload(), "events": args.events})
        app = create_app(Settings.from_env({**os.environ, "DATABASE_URL": url, "WEBHOOK_ADMIN_TOKEN": TOKEN}))
        client = app.test_client()
        client.environ_base[LISTENER] = ADMIN
        pages = {
            "console": "/admin",
            "bulk confirmation": "/admin/reprocess",
            "find: every event": "/admin/events",
            "find: by payment id": f"/admin/events?q=pi_bench_{args.events // 2}",
            "an event": "/admin/events/stripe/evt_bench_1",
        }
        rows = []
        for name, path in pages.items():
            took, size = [], 0
            for _ in range(args.repeat):
                start = time.perf_counter()
                answer = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
                took.append(time.perf_counter() - start)
                assert answer.status_code == 200, (path, answer.status_code)
                size = len(answer.data)
            median = statistics.median(took)
            rows.append(
                [
                    name,
                    path,
                    f"{size / 1000:.1f}",
                    f"{size / BUDGET_BYTES:.2f}",
                    f"{median * 1000:.0f}",
                    f"{median / BUDGET_S:.2f}",
                ]
            )
        app.extensions["webhooks.pool"].close()
    print(f"{args.events} failed events; each page's median of {args.repeat}")
    print(markdown_table(["page", "path", "kB", "of 200 kB", "ms", "of 1 s"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
