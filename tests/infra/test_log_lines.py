"""Log lines stay whole when several processes share one stdout.

gunicorn's workers inherit the master's stdout, and platforms commonly run
Python with PYTHONUNBUFFERED=1. A line written in two pieces (the message,
then its newline) can then have another worker's line land between them.
"""

import json
import os
import subprocess
import sys
import time

LINES = 3000
PROCESSES = 4
# Each process waits for this moment, so their writes overlap.
_WRITER = """
import sys, time
from webhooks.infra import logs
import structlog
logs.configure()
log = structlog.get_logger()
start = float(sys.argv[1])
time.sleep(max(0.0, start - time.time()))
for n in range(int(sys.argv[2])):
    log.info("line", n=n, filler="x" * 200)
"""


def test_worker_processes_sharing_stdout_write_whole_json_lines(tmp_path):
    out = tmp_path / "shared.log"
    start = time.time() + 3
    with open(out, "w") as shared:
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(start), str(LINES)],
                stdout=shared,
                stderr=subprocess.PIPE,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            for _ in range(PROCESSES)
        ]
        errors = [writer.communicate(timeout=120)[1] for writer in writers]
    assert all(writer.returncode == 0 for writer in writers), errors
    lines = out.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["line"] * (LINES * PROCESSES)


def test_a_value_orjson_refuses_is_still_written_as_a_json_line():
    script = (
        "import structlog\n"
        "from webhooks.infra import logs\n"
        "logs.configure()\n"
        "log = structlog.get_logger()\n"
        "log.info('odd_values', big=2**70, lone='\\ud800', ok='\\u00e9')\n"
        "log.info('plain', duration_ms=1.5, nested={'a': [1, None]})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    odd, plain = [json.loads(line) for line in done.stdout.splitlines()]
    assert (odd["big"], odd["lone"], odd["ok"]) == (2**70, "\ud800", "\u00e9")
    assert (plain["event"], plain["duration_ms"], plain["nested"]) == ("plain", 1.5, {"a": [1, None]})


def test_a_line_never_carries_an_email_a_phone_number_or_an_address():
    # A handler's PublicError can name what a customer sent; a caller can log a value it should not.
    script = (
        "import structlog\n"
        "from webhooks.infra import logs\n"
        "from webhooks.infra.errors import PublicError\n"
        "logs.configure()\n"
        "log = structlog.get_logger()\n"
        "log.info('noted', note='ask jane.doe@example.com or +1 415-555-2671',"
        " event_id='evt_1NG8Du2eZvKYlo2C')\n"
        "try:\n"
        "    raise PublicError('no account for jane.doe@example.com at 12 Main Street')\n"
        "except PublicError:\n"
        "    log.exception('failed')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    noted, failed = [json.loads(line) for line in done.stdout.splitlines()]
    assert (noted["note"], noted["event_id"]) == ("ask [redacted] or [redacted]", "evt_1NG8Du2eZvKYlo2C")
    assert failed["exception"]["message"] == "no account for [redacted] at [redacted]"
