"""A small valid agent config, and how the config tests validate it and read its errors."""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from agents import config


def minimal() -> dict:
    """A small valid config; tests break one thing at a time."""
    return {
        "slug": "w9-collector",
        "name": "W-9 collector",
        "capabilities": ["email", "sms"],
        "instructions": "Collect a signed W-9.",
        "contacts": [{"role": "vendor", "channels": ["email", "sms"]}],
        "tasks": [
            {
                "key": "collect_w9",
                "title": "Signed W-9 received",
                "contact_role": "vendor",
                "done_when": {"type": "attachment_received", "filename_pattern": "(?i)w-?9"},
            }
        ],
        "followup": {
            "steps": [
                {"delay": "0m", "channel": "email"},
                {"delay": "3bd", "channel": "email"},
                {"delay": "2bd", "channel": "sms"},
            ]
        },
        "compliance": {"opt_out_text": {"sms": "Reply STOP to opt out."}},
        "model": {
            "provider": "scripted",
            "scripted": {
                "messages": {
                    "first": {"subject": "W-9 for {org.name}", "body": "Hi {contact.first_name}, please send it."},
                    "followup": {"body": "A reminder about the W-9.", "short": "W-9 reminder from {org.name}."},
                }
            },
        },
        "evals": [
            {
                "name": "silent",
                "personas": {"vendor": {"traits": [{"type": "silent"}]}},
                "expect": {"escalated": True},
            }
        ],
    }


def validate(data: dict) -> config.ValidationResult:
    return config.validate_source(yaml.safe_dump(data, sort_keys=False))


def paths(result: config.ValidationResult) -> list[str]:
    return [error.path for error in result.errors]


def only_error(result: config.ValidationResult) -> config.ConfigError:
    assert len(result.errors) == 1, [str(e) for e in result.errors]
    return result.errors[0]


def locations(node: object, *, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path into a config's nested dicts and lists, parents before children."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from locations(child, prefix=(*prefix, key))


def set_at(node: object, *, loc: tuple, value: object) -> None:
    """`value` at the path `loc` (one of `locations`)."""
    for key in loc[:-1]:
        node = node[key]
    node[loc[-1]] = value
