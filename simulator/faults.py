"""A case's `faults`: outage windows on the run's virtual calendar, armed while the case runs.

Days are calendar days in the organization's zone (day 0: the start date);
a window opens on `from_day` at `at` (midnight when unset) and closes at the
end of `to_day`, or `lasts` after it opened. The runtime meets them where it
meets real outages (connectors.outages): the model client raises a
retryable error, the sending provider a ConnectorError.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from connectors import outages


def windows_for(faults: list[dict], *, start: datetime, zone: ZoneInfo) -> list[outages.Window]:
    first_day = start.astimezone(zone).date()
    windows = []
    for fault in faults:
        hour, minute = map(int, (fault.get("at") or "00:00").split(":"))
        day = first_day + timedelta(days=fault["from_day"])
        opens = datetime.combine(day, time(hour, minute), tzinfo=zone)
        if fault.get("lasts"):
            closes = opens + timedelta(seconds=fault["lasts"])
        else:
            closes = datetime.combine(first_day + timedelta(days=fault["to_day"] + 1), time(0, 0), tzinfo=zone)
        windows.append(outages.Window(kind=fault["kind"], starts=opens, ends=closes,
                                      channel=fault.get("channel") or ""))
    return windows


@contextlib.contextmanager
def armed(run_id: int, windows: list[outages.Window]) -> Iterator[None]:
    """The windows apply to the run for the duration of the block, and never after (a crash included)."""
    outages.arm(run_id, windows)
    try:
        yield
    finally:
        outages.disarm(run_id)


def describe(window: outages.Window, *, start: datetime, zone: ZoneInfo) -> str:
    first_day = start.astimezone(zone).date()
    opens, closes = window.starts.astimezone(zone), window.ends.astimezone(zone)
    where = f" ({window.channel})" if window.channel else ""
    return (f"{window.kind}{where} from day {(opens.date() - first_day).days} {opens:%H:%M} "
            f"to day {(closes.date() - first_day).days} {closes:%H:%M}")
