"""`make chaos` in small: the same harness (python -m chaos) with a dozen runs and every fault kind, ~1 minute.

The runs climb six rungs of the agent's ladder, not eleven: settling waits for
every run to reach the top, a rung every few seconds, so the ladder's length
(not the number of runs) bounds the test's time; six rungs still keep the
workers busy through the fault phase.

It starts its own PostgreSQL (never the test database's server: it restarts
it twice), real worker commands and the Twilio fake, and must end with every
invariant held and every enabled fault injected.

Idle-worker kills are included: the workers run under `manage.py runworkers`,
which keeps a killed idle worker from freezing the cluster (django-q2 issue
#23) and restarts a cluster that stops making progress anyway.
"""

import re
import subprocess
import sys

import pytest

from chaos import schedule
from chaos.database import BASE_DIR

pytestmark = pytest.mark.slow


def test_a_small_chaos_run_through_real_worker_commands_holds_every_invariant():
    kinds = schedule.KINDS
    result = subprocess.run(  # noqa: S603 - a fixed command line
        [sys.executable, "-m", "chaos", "--runs", "12", "--rungs", "6", "--duration", "30", "--ramp", "8",
         "--settle", "45", "--settle-max", "240", "--seed", "7", "--faults", ",".join(kinds), "--progress-every", "10"],
        cwd=BASE_DIR, capture_output=True, text=True, timeout=600,
    )
    output = result.stdout + result.stderr[-3000:]
    assert result.returncode == 0, output
    assert "all invariants held" in result.stdout, output
    for kind in kinds:
        injected = re.search(rf"^{re.escape(kind)}\s+(\d+)$", result.stdout, flags=re.MULTILINE)
        assert injected and int(injected.group(1)) >= 1, f"{kind} was never injected\n{output}"
    assert re.search(r"^db-restart\s+([2-9]|\d\d+)$", result.stdout, flags=re.MULTILINE), output
