"""Cross-field rules for eval cases: personas, inputs and expectations must match the agent."""

from __future__ import annotations

from collections.abc import Iterator

from agents.config.errors import ConfigError, format_path, suggest
from agents.config.shapes import as_list, as_map, entries, names, strings


def check_evals(data: dict) -> Iterator[ConfigError]:
    for i, case in entries(data, key="evals"):
        yield from _personas(data, case=case, index=i)
        yield from _inputs(data, case=case, index=i)
        yield from _expect(data, case=case, index=i)


def _personas(data: dict, *, case: dict, index: int) -> Iterator[ConfigError]:
    personas = case.get("personas")
    if not isinstance(personas, dict) or not isinstance(data.get("contacts"), list):
        return
    roles = names(data, section="contacts", key="role")
    for role, persona in personas.items():
        where = ["evals", index, "personas", str(role)]
        if role not in roles:
            yield ConfigError(
                format_path(where),
                f"role {role!r} is not declared in contacts",
                suggest(role, known=roles, kind="contact role"),
            )
        kinds = [as_map(trait).get("type") for trait in as_list(as_map(persona).get("traits"))]
        if "silent" in kinds and len(kinds) > 1:
            yield ConfigError(
                format_path([*where, "traits"]),
                "silent cannot be combined with other traits",
                "keep only silent, or drop it",
            )
    required = [
        as_map(c).get("role") for _, c in entries(data, key="contacts") if as_map(c).get("required", True) is True
    ]
    for role in required:
        if isinstance(role, str) and role not in personas:
            yield ConfigError(
                format_path(["evals", index, "personas"]),
                f"no persona for the required contact role {role!r}",
                f"add personas.{role} (traits: [{{type: silent}}] for someone who never answers)",
            )


def _inputs(data: dict, *, case: dict, index: int) -> Iterator[ConfigError]:
    if not isinstance(data.get("inputs", []), list):
        return
    declared = names(data, section="inputs", key="key")
    given = as_map(case.get("inputs"))
    for key in given:
        if key not in declared:
            path = format_path(["evals", index, "inputs", str(key)])
            yield ConfigError(path, f"input {key!r} is not declared", suggest(key, known=declared, kind="input"))
    for _, spec in entries(data, key="inputs"):
        key = spec.get("key")
        if isinstance(key, str) and spec.get("required", True) is True and key not in given:
            yield ConfigError(
                format_path(["evals", index, "inputs"]), f"required input {key!r} is missing", f"add inputs.{key}"
            )


def _expect(data: dict, *, case: dict, index: int) -> Iterator[ConfigError]:
    expect = as_map(case.get("expect"))
    where = ["evals", index, "expect"]
    weeks = case.get("weeks", 6)
    last_day = weeks * 7 if type(weeks) is int else None
    days = [([*where, name], expect.get(name)) for name in ("tasks_done_by_day", "escalated_by_day",
                                                            "not_done_before_day")]
    days += [(["evals", index, "faults", j, "from_day"], as_map(fault).get("from_day"))
             for j, fault in enumerate(as_list(case.get("faults")))]
    for path, day in days:
        if last_day is not None and type(day) is int and day > last_day:
            yield ConfigError(format_path(path), f"day {day} is after the simulation ends (day {last_day})",
                              f"use a day up to {last_day} or raise weeks")
    if isinstance(data.get("tasks"), list):
        keys = names(data, section="tasks", key="key")
        for j, key in enumerate(as_list(expect.get("open_tasks"))):
            if isinstance(key, str) and key not in keys:
                path = format_path([*where, "open_tasks", j])
                yield ConfigError(path, f"task {key!r} is not declared", suggest(key, known=keys, kind="task"))
    if isinstance(data.get("capabilities"), list):
        capabilities = strings(data["capabilities"])
        for j, channel in enumerate(as_list(expect.get("uses_channels"))):
            if isinstance(channel, str) and channel not in capabilities:
                path = format_path([*where, "uses_channels", j])
                yield ConfigError(path, f"the agent cannot use {channel!r}", f"use one of: {', '.join(capabilities)}")
