"""The database ceiling: pgbench running the service's own claim + fulfil + complete SQL.

The statements are the service's (webhooks.ledger, webhooks.fulfilment) with
their parameters replaced by pgbench expressions, and the three scripts are
weighted like the events of one Checkout payment: the session fulfils a new
payment, the payment intent finds it already fulfilled, the charge has no
handler and is only claimed and completed.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from webhooks import fulfilment, ledger

PGBENCH = "pgbench"
PAID_BEFORE = "pi_bench_paid_before"
_EVENT_ID = "'evt_pgb_' || :client_id || '_' || :n"


@dataclass(frozen=True)
class Outcome:
    tps: float
    latencies_ms: list[float]


def _bind(sql: str, *expressions: str) -> str:
    """`sql` with each %s replaced, in order, by a pgbench expression."""
    parts = sql.strip().split("%s")
    assert len(parts) == len(expressions) + 1, f"{len(parts) - 1} parameters in {sql!r}"
    bound = parts[0] + "".join(f"{e}{rest}" for e, rest in zip(expressions, parts[1:]))
    return re.sub(r"\s+", " ", bound)


def _script(event_type: str, payment_id: str | None, outcome: str, payload_bytes: int) -> str:
    claim = _bind(
        ledger._CLAIM, "'stripe'", _EVENT_ID, f"'{event_type}'", "NULL", "false", "now()",
        f"repeat('x', {payload_bytes})",
    )
    complete = _bind(
        ledger._COMPLETE, f"'{outcome}'", "200",
        f"'{{\"event_id\":\"evt_pgb_' || :client_id || '_' || :n || '\",\"outcome\":\"{outcome}\"}}'",
        ":ledger_id",
    )
    lines = ["\\set n random(1, 1000000000000000)", "BEGIN;", f"{claim} \\gset ledger_", ]
    if payment_id:
        fulfil = _bind(
            fulfilment._FULFIL, payment_id, "NULL", _EVENT_ID, f"'{event_type}'", "3000", "'usd'"
        )
        lines.append(f"{fulfil};")
    lines += [f"{complete};", "COMMIT;"]
    return "\n".join(lines) + "\n"


def scripts(payload_bytes: int) -> dict[str, str]:
    return {
        "checkout_session_fulfils": _script(
            "checkout.session.completed", "'pi_pgb_' || :client_id || '_' || :n",
            fulfilment.FULFILLED, payload_bytes,
        ),
        "payment_intent_already_fulfilled": _script(
            "payment_intent.succeeded", f"'{PAID_BEFORE}'", fulfilment.ALREADY_FULFILLED,
            payload_bytes,
        ),
        "charge_ignored": _script("charge.succeeded", None, fulfilment.IGNORED, payload_bytes),
    }


def run(conninfo: str, clients: int, seconds: int, payload_bytes: int) -> Outcome:
    with tempfile.TemporaryDirectory() as tmp:
        args = [PGBENCH, "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T", str(seconds)]
        for name, text in scripts(payload_bytes).items():
            path = Path(tmp) / f"{name}.sql"
            path.write_text(text)
            args += ["-f", f"{path}@1"]
        args += ["--log", "--log-prefix", str(Path(tmp) / "txn"), conninfo]
        done = subprocess.run(args, capture_output=True, text=True, cwd=tmp, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed:\n{done.stdout}\n{done.stderr}")
        tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", done.stdout)[1])
        latencies = sorted(
            int(line.split()[2]) / 1000
            for log in Path(tmp).glob("txn*")
            for line in log.read_text().splitlines()
        )
    return Outcome(tps, latencies)
