"""Plain-text renderings of simulation results: a progress bar, case timelines and the scorecard table."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

BAR_WIDTH = 20
REASON_WIDTH = 70


class ProgressBar:
    """`[#####-----]  50% case-name` redrawn in place through `write` (stderr: stdout stays for results).

    Off a terminal (CI logs, `make demo | tee`) redrawing would pile up carriage
    returns, so it writes one line per case instead.
    """

    def __init__(self, write: Callable[[str], object], *, width: int = BAR_WIDTH, redraw: bool = True) -> None:
        self.write = write
        self.width = width
        self.redraw = redraw
        self._last = ""
        self._case = ""

    def __call__(self, index: int, count: int, name: str, fraction: float) -> None:
        if not self.redraw:
            if name and name != self._case and index < count:
                self._case = name
                self.write(f"simulating case {index + 1}/{count}: {name}\n")
            return
        overall = 1.0 if count == 0 else min(1.0, (index + fraction) / count)
        filled = round(overall * self.width)
        line = f"[{'#' * filled}{'-' * (self.width - filled)}] {overall:4.0%} {name}"
        if line == self._last:
            return
        # Pad over the previous line: a shorter case name must not leave the old one's tail.
        self.write("\r" + line.ljust(len(self._last)))
        self._last = line

    def close(self) -> None:
        if self._last:
            self.write("\n")
            self._last = ""


def timeline(result: dict) -> list[str]:
    """One case's timeline as aligned lines: virtual day, time, direction, channel, what happened."""
    status = "pass" if result.get("passed") else "FAIL"
    lines = [f"== {result['name']} ({status}) " + "=" * max(0, 60 - len(result["name"]))]
    items = result.get("timeline") or []
    if not items:
        lines.append("   (no events)")
    rows = [
        (_day(item.get("day")), item.get("local") or _clock(item.get("at")), _direction(item.get("direction")),
         item.get("channel") or "-", item.get("kind") or item.get("type") or "", _one_line(item.get("summary")))
        for item in items
    ]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(5)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)]
        lines.append("   " + "  ".join(cells) + "  " + row[5])
    return lines


def table(cases: list[dict]) -> list[str]:
    """The scorecard table: case, pass/FAIL, days to done, messages, escalations, reasons."""
    header = ("case", "result", "days to done", "messages", "escalations", "reasons")
    rows = []
    for case in cases:
        metrics = case.get("metrics") or {}
        days = metrics.get("days_to_done")
        reasons = "; ".join(case.get("reasons") or []) or "-"
        rows.append((
            case["name"], "pass" if case["passed"] else "FAIL", "-" if days is None else f"{days:g}",
            str(metrics.get("messages", "-")), str(metrics.get("escalations", "-")), _clip(reasons),
        ))
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) if rows else len(header[i]) for i in range(5)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(header[:5], widths, strict=True)) + "  reasons"]
    lines.append("  ".join("-" * width for width in widths) + "  " + "-" * 7)
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)) + "  " + row[5])
    return lines


def verdict(scorecard: dict) -> str:
    metrics = scorecard.get("metrics") or {}
    word = "PASSED" if scorecard.get("passed") else "FAILED"
    count = f"{metrics.get('passed', 0)}/{metrics.get('cases', 0)} cases"
    line = f"{scorecard['agent']} v{scorecard['version']}: {word} ({count})"
    if metrics.get("reason"):
        line += f": {metrics['reason']}"
    if metrics.get("approvals"):  # approval mode: what the cases' human did with the drafts
        line += "; drafts " + ", ".join(f"{count} {decision}" for decision, count in metrics["approvals"].items())
    return line


def _day(value) -> str:
    # The engine gives calendar days in the organization's zone (day 0: the start date); the clock column has the time.
    return f"day {int(value)}" if isinstance(value, int | float) else f"day {value or '?'}"


def _clock(value) -> str:
    if isinstance(value, datetime):
        return value.strftime("%a %H:%M")
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value).strftime("%a %H:%M")
        except ValueError:
            return value
    return ""


def _direction(value: str | None) -> str:
    return {"out": "->", "in": "<-"}.get(value or "", "  ")


def _one_line(text) -> str:
    return _clip(" ".join(str(text or "").split()), width=100)


def _clip(text: str, *, width: int = REASON_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
