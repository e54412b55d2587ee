"""Public holidays: days that are not business days, from the `holidays` package.

The plan's `followup.holidays` lists ISO country codes, and `contact` for the
country of the zone the plan's hours are read in (runs.policy.window
.resolve_timezone: the contact's timezone, else the organization's). A zone's
country comes from the IANA zone table (zone.tab: Europe/London → GB); a zone
with no country (UTC, Etc/*) adds no holidays. Contacts carry no country of
their own, so their timezone is the best evidence of where they are.

Calendars are computed once per country and year and cached: the policy asks
for the same few years again and again.
"""

from __future__ import annotations

import zoneinfo
from datetime import date
from functools import cache
from pathlib import Path

import holidays

# The plan's word for "the country of the timezone the hours are read in".
CONTACT = "contact"


def closed_days(plan: dict, *, zone_name: str):
    """A predicate `day -> bool`: True on a public holiday of the plan's calendars; None when there are none."""
    countries = countries_for(plan, zone_name=zone_name)
    if not countries:
        return None
    return closed_on(countries)


@cache
def closed_on(countries: tuple[str, ...]):
    """The predicate `day -> bool` for these countries' public holidays: one per tuple of countries, so the send
    rules that hold it compare (and cache, runs.policy.window) as equal."""
    return lambda day: is_holiday(day, countries=countries)


def countries_for(plan: dict, *, zone_name: str) -> tuple[str, ...]:
    """The country codes whose public holidays apply, `contact` resolved through `zone_name`."""
    wanted = (plan.get("followup") or {}).get("holidays") or []
    found = []
    for code in wanted:
        country = zone_country(zone_name) if code == CONTACT else code
        if country and country not in found:
            found.append(country)
    return tuple(found)


def is_holiday(day: date, *, countries: tuple[str, ...]) -> bool:
    return any(day in _calendar(country, day.year) for country in countries)


def holiday_name(day: date, *, countries: tuple[str, ...]) -> str | None:
    """The holiday's name on `day` (for journal notes and timelines), or None on an ordinary day."""
    for country in countries:
        if day in _calendar(country, day.year):
            return _names(country, day.year).get(day)
    return None


@cache
def _calendar(country: str, year: int) -> frozenset[date]:
    return frozenset(_names(country, year))


@cache
def _names(country: str, year: int) -> dict[date, str]:
    try:
        return dict(holidays.country_holidays(country, years=year))
    except NotImplementedError:  # a code the package dropped since the plan was compiled: no holidays, not a crash
        return {}


def zone_country(zone_name: str) -> str | None:
    """The ISO country code of an IANA zone (None for UTC and other zones of no country)."""
    return _zone_countries().get(zone_name or "")


@cache
def _zone_countries() -> dict[str, str]:
    """zone → country from zone.tab, wherever the system or the tzdata package keeps the zone database."""
    for root in _zone_roots():
        table = root / "zone.tab"
        if table.is_file():
            return _parse_zone_tab(table.read_text(encoding="utf-8"))
    return {}


def _zone_roots() -> list[Path]:
    roots = [Path(path) for path in zoneinfo.TZPATH]
    try:
        import tzdata  # the zone database as a package, where the system has none (Windows, slim images)

        roots.append(Path(tzdata.__file__).parent / "zoneinfo")
    except ImportError:
        pass
    return roots


def _parse_zone_tab(text: str) -> dict[str, str]:
    table = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) >= 3:
            table[fields[2]] = fields[0]
    return table
