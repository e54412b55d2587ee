"""Tolerant readers over raw parsed YAML, for rules that must not trip on malformed input."""

from __future__ import annotations

from collections.abc import Iterator


def as_map(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list:
    return value if isinstance(value, list) else []


def strings(value: object) -> list[str]:
    """The string items of a list; anything else counts as empty."""
    return [item for item in as_list(value) if isinstance(item, str)]


def entries(data: object, *, key: str) -> Iterator[tuple[int, dict]]:
    """(index, item) for the mapping items of the list at `data[key]`."""
    for index, item in enumerate(as_list(as_map(data).get(key))):
        if isinstance(item, dict):
            yield index, item


def names(data: object, *, section: str, key: str) -> list[str]:
    """The string `key` of each mapping in `data[section]`: contact roles, task keys..."""
    return [value for _, item in entries(data, key=section) if isinstance(value := item.get(key), str)]
