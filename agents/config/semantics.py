"""Rules that relate one part of a config to another.

They read the raw parsed YAML rather than the validated model, so they still
run when pydantic rejected some other part: a builder sees every problem in
one pass. Each rule skips values of the wrong shape, which pydantic reports.
"""

from __future__ import annotations

from collections.abc import Iterator

from agents.config import send_hours
from agents.config.errors import ConfigError, format_path, suggest
from agents.config.schema import CHANNEL_TOOL, TOOL_CHANNEL, ComplianceSpec
from agents.config.schema_base import CHANNELS, CLOCK_TIME
from agents.config.schema_followup import BusinessHours
from agents.config.semantics_evals import check_evals
from agents.config.semantics_scripted import check_scripted
from agents.config.shapes import as_list, as_map, entries, names, strings


def check(data: dict) -> list[ConfigError]:
    """Every cross-field problem in `data`, a mapping parsed from config YAML."""
    return [
        *_duplicates(data),
        *_contact_channels(data),
        *_step_channels(data),
        *_unreachable_capabilities(data),
        *_tool_channels(data),
        *_opt_out(data),
        *_approval_channels(data),
        *_task_roles(data),
        *_followup_rules(data),
        *check_evals(data),
        *check_scripted(data),
    ]


def _duplicates(data: dict) -> Iterator[ConfigError]:
    followup = as_map(data.get("followup"))
    lists = {
        ("capabilities",): as_list(data.get("capabilities")),
        ("tools",): as_list(data.get("tools")),
        ("followup", "business_days"): as_list(followup.get("business_days")),
    }
    for where, items in lists.items():
        yield from _repeats([*where], pairs=list(enumerate(items)))
    for section, key in (("contacts", "role"), ("tasks", "key"), ("inputs", "key"), ("evals", "name")):
        yield from _repeats([section], pairs=[(i, item.get(key)) for i, item in entries(data, key=section)], key=key)


def _repeats(loc: list, *, pairs: list[tuple[int, object]], key: str | None = None) -> Iterator[ConfigError]:
    seen = set()
    for index, value in pairs:
        if not isinstance(value, str):
            continue
        if value in seen:
            path = format_path([*loc, index, key] if key else [*loc, index])
            yield ConfigError(path, f"{value!r} is listed twice", "remove the repeat or rename it")
        seen.add(value)


def _capabilities(data: dict) -> set[str] | None:
    """The valid channels declared, or None when `capabilities` is not a list (channel rules then skip)."""
    raw = data.get("capabilities")
    return {c for c in strings(raw) if c in CHANNELS} if isinstance(raw, list) else None


def _not_capable(channel: str, *, capabilities: set[str]) -> str:
    declared = ", ".join(c for c in CHANNELS if c in capabilities) or "none"
    return f"add {channel} to capabilities, or use one of: {declared}"


def _approval_channels(data: dict) -> Iterator[ConfigError]:
    capabilities = _capabilities(data)
    if capabilities is None:
        return
    for channel in as_map(as_map(data.get("approvals")).get("channels")):
        if channel in CHANNELS and channel not in capabilities:
            fix = _not_capable(channel, capabilities=capabilities)
            yield ConfigError(format_path(["approvals", "channels", channel]),
                              f"{channel} is not a capability of this agent",
                              f"remove it from approvals.channels, or {fix}")


def _contact_channels(data: dict) -> Iterator[ConfigError]:
    capabilities = _capabilities(data)
    if capabilities is None:
        return
    for i, contact in entries(data, key="contacts"):
        for j, channel in enumerate(as_list(as_map(contact).get("channels"))):
            if channel in CHANNELS and channel not in capabilities:
                path = format_path(["contacts", i, "channels", j])
                yield ConfigError(
                    path,
                    f"channel {channel!r} is not in capabilities",
                    _not_capable(channel, capabilities=capabilities),
                )


def _reachable_channels(data: dict, *, capabilities: set[str]) -> set[str]:
    """Channels at least one declared contact can be reached on (a contact without `channels` has them all)."""
    reachable: set[str] = set()
    for _, contact in entries(data, key="contacts"):
        channels = as_map(contact).get("channels")
        reachable |= set(strings(channels)) if isinstance(channels, list) else capabilities
    return reachable


def _step_channels(data: dict) -> Iterator[ConfigError]:
    capabilities = _capabilities(data)
    if capabilities is None:
        return
    tools = data.get("tools")
    for i, step in entries(data.get("followup"), key="steps"):
        channel = as_map(step).get("channel")
        if channel not in CHANNELS:
            continue
        path = format_path(["followup", "steps", i, "channel"])
        tool = CHANNEL_TOOL[channel]
        if channel not in capabilities:
            yield ConfigError(
                path, f"channel {channel!r} is not in capabilities", _not_capable(channel, capabilities=capabilities)
            )
        elif isinstance(tools, list) and tool not in tools:
            yield ConfigError(path, f"a {channel} step needs the {tool} tool", f"add {tool} to tools")


def _unreachable_capabilities(data: dict) -> Iterator[ConfigError]:
    capabilities = _capabilities(data)
    if capabilities is None or not isinstance(data.get("contacts"), list):
        return
    reachable = _reachable_channels(data, capabilities=capabilities)
    for i, channel in enumerate(as_list(data.get("capabilities"))):
        if isinstance(channel, str) and channel in capabilities and channel not in reachable:
            yield ConfigError(
                format_path(["capabilities", i]),
                f"no contact can be reached on {channel}",
                f"add {channel} to a contact's channels, or remove it",
            )


def _tool_channels(data: dict) -> Iterator[ConfigError]:
    capabilities = _capabilities(data)
    if capabilities is None:
        return
    for i, tool in enumerate(as_list(data.get("tools"))):
        channel = TOOL_CHANNEL.get(tool) if isinstance(tool, str) else None
        if channel and channel not in capabilities:
            yield ConfigError(
                format_path(["tools", i]),
                f"{tool} needs the {channel} capability",
                f"add {channel} to capabilities or remove {tool}",
            )


def _opt_out(data: dict) -> Iterator[ConfigError]:
    capabilities = _capabilities(data)
    if capabilities is None:
        return
    compliance = as_map(data.get("compliance"))
    texts = compliance.get("opt_out_text", {})
    for channel in strings(list(as_map(texts))):
        if channel in CHANNELS and channel not in capabilities:
            yield ConfigError(
                format_path(["compliance", "opt_out_text", channel]),
                f"opt-out text for {channel}, which is not in capabilities",
                f"remove it or add {channel} to capabilities",
            )
    if "sms" in capabilities and isinstance(texts, dict) and "sms" not in texts:
        yield ConfigError(
            format_path(["compliance", "opt_out_text"] if "opt_out_text" in compliance else ["compliance"]),
            "an agent that sends SMS must say how to opt out",
            'add opt_out_text: {sms: "Reply STOP to opt out."} under compliance',
        )


def _task_roles(data: dict) -> Iterator[ConfigError]:
    if not isinstance(data.get("contacts"), list):
        return
    roles = names(data, section="contacts", key="role")
    for i, task in entries(data, key="tasks"):
        role = as_map(task).get("contact_role")
        if isinstance(role, str) and role not in roles:
            yield ConfigError(
                format_path(["tasks", i, "contact_role"]),
                f"role {role!r} is not declared in contacts",
                suggest(role, known=roles, kind="contact role"),
            )


def _followup_rules(data: dict) -> Iterator[ConfigError]:
    followup = as_map(data.get("followup"))
    source = followup.get("timezone_source", "contact")
    if source == "fixed" and followup.get("timezone") is None:
        yield ConfigError("followup.timezone", "required when timezone_source is fixed", "add timezone: Europe/Paris")
    if source in ("contact", "organization") and followup.get("timezone") is not None:
        yield ConfigError(
            "followup.timezone",
            f"timezone is ignored when timezone_source is {source}",
            "set timezone_source: fixed, or remove timezone",
        )
    yield from _cadence_time(data, followup=followup)
    yield from _send_window(data, followup=followup)
    steps, attempts = followup.get("steps"), followup.get("max_attempts")
    if isinstance(steps, list) and steps and type(attempts) is int and attempts > len(steps):
        yield ConfigError(
            "followup.max_attempts",
            f"max_attempts {attempts} is more than the {len(steps)} ladder steps",
            f"use at most {len(steps)}, or add steps",
        )


def _cadence_time(data: dict, *, followup: dict) -> Iterator[ConfigError]:
    """A check-in time outside business hours would silently move to the next opening: say so instead."""
    at = as_map(data.get("cadence")).get("at")
    start, end = _business_hours(followup)
    if not all(isinstance(value, str) for value in (at, start, end)):
        return
    if not start <= at < end:
        yield ConfigError("cadence.at", f"{at} is outside business hours ({start}–{end})",
                          f'pick a time from {start} to before {end}, e.g. at: "{start}"')


_DEFAULT_HOURS = BusinessHours()
_DEFAULT_QUIET = ComplianceSpec().quiet_hours


def _business_hours(followup: dict) -> tuple[object, object]:
    hours = as_map(followup.get("business_hours"))
    return hours.get("start", _DEFAULT_HOURS.start), hours.get("end", _DEFAULT_HOURS.end)


def _send_window(data: dict, *, followup: dict) -> Iterator[ConfigError]:
    """Business hours entirely inside quiet hours leave no time to send: every message would be deferred for ever
    (runs.policy.window finds no opening), so the config is refused instead."""
    start, end = _business_hours(followup)
    compliance = as_map(data.get("compliance"))
    quiet = as_map(compliance.get("quiet_hours", _DEFAULT_QUIET.model_dump()) or {})
    quiet_start, quiet_end = quiet.get("start"), quiet.get("end")
    times = (start, end, quiet_start, quiet_end)
    if not all(isinstance(value, str) and CLOCK_TIME.fullmatch(value) for value in times) or not start < end \
            or quiet_start == quiet_end:
        return  # no quiet hours, or a malformed time or window: the schema says so
    spans = send_hours.quiet_spans((quiet_start, quiet_end))
    if not send_hours.send_spans(send_hours.minutes(start), send_hours.minutes(end), spans):
        # At the business hours when the config names them, else at the quiet hours it names.
        where = "followup.business_hours" if "business_hours" in followup else "compliance.quiet_hours"
        yield ConfigError(
            where,
            f"business hours {start}–{end} lie entirely inside quiet hours {quiet_start}–{quiet_end}: "
            "nothing could ever be sent",
            "move business_hours out of compliance.quiet_hours, or narrow the quiet hours",
        )
