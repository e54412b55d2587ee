"""The run's clock: real time, or the virtual time of a simulated run.

Nothing else in the runtime calls `timezone.now()`; the simulator moves a sim
run's `virtual_now` and every due time, follow-up and prompt "now" follows.
Leases never use this clock: they guard processes, so they run on the
database's real clock (runs.leases).
"""

from datetime import datetime

from django.utils import timezone

from runs.models import Run


def now(run: Run | None = None) -> datetime:
    if run is not None and run.sim and run.virtual_now is not None:
        return run.virtual_now
    return timezone.now()


def wall_now() -> datetime:
    """Real time, for bookkeeping that is about processes, not the run's story."""
    return timezone.now()
