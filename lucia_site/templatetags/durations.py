"""`{{ value|duration }}`: a timedelta or a number of seconds as people read ages ("2d 3h", "4h 05m", "40s")."""

from datetime import timedelta

from django import template

register = template.Library()


@register.filter
def duration(value: timedelta | float | int | None) -> str:
    if value is None or value == "":
        return "—"
    seconds = int(value.total_seconds() if isinstance(value, timedelta) else float(value))
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{sign}{days}d {hours}h"
    if hours:
        return f"{sign}{hours}h {minutes:02d}m"
    if minutes:
        return f"{sign}{minutes}m {seconds:02d}s"
    return f"{sign}{seconds}s"
