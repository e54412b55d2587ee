"""A day's send spans: business hours less quiet hours, in minutes after local midnight.

One spelling for the config's check (agents.config.semantics refuses hours that leave no time to send) and the
runtime's windows (runs.policy.window turns the spans into instants of a day). Quiet hours may wrap midnight.
"""

from __future__ import annotations

Span = tuple[int, int]
DAY = 24 * 60


def minutes(clock: str) -> int:
    """'HH:MM' as minutes after midnight."""
    hour, minute = clock.split(":")
    return int(hour) * 60 + int(minute)


def quiet_spans(quiet: tuple[str, str] | None) -> tuple[Span, ...]:
    """Quiet hours (start, end) as spans of one day; None: no quiet hours."""
    if not quiet:
        return ()
    start, end = minutes(quiet[0]), minutes(quiet[1])
    if start < end:
        return ((start, end),)
    return ((start, DAY), (0, end))  # wraps midnight: the evening and the early morning of each day


def send_spans(opens: int, closes: int, quiet: tuple[Span, ...]) -> list[Span]:
    """Business hours [opens, closes) less the quiet spans: empty when nothing may be sent all day."""
    spans = [(opens, closes)]
    for cut_start, cut_end in quiet:
        spans = [(a, b) for start, end in spans
                 for a, b in ((start, min(end, cut_start)), (max(start, cut_end), end)) if a < b]
    return spans
