"""Compile a validated config to the plan the runtime, simulator and API consume.

The plan is plain JSON with every default filled in and every set-like list
in canonical order, so two configs that mean the same thing compile to the
same plan and the same hash, however their YAML was formatted.
"""

from __future__ import annotations

import hashlib
import json

from agents.config import tool_schemas
from agents.config.compiler_model import compile_model
from agents.config.schema import AgentConfig, ComplianceSpec
from agents.config.schema_base import CHANNELS, WEEKDAYS
from agents.config.schema_cadence import CadenceSpec
from agents.config.schema_evals import EvalCase, Persona
from agents.config.schema_followup import FollowupSpec
from agents.config.schema_tasks import TaskSpec

PLAN_SCHEMA = 1


def compile_config(cfg: AgentConfig) -> dict:
    """The normalized, JSON-serialisable plan of `cfg`."""
    return {
        "schema": PLAN_SCHEMA,
        "slug": cfg.slug,
        "name": cfg.name.strip(),
        "description": cfg.description.strip(),
        "capabilities": [channel for channel in CHANNELS if channel in cfg.capabilities],
        "instructions": cfg.instructions.strip(),
        "inputs": [{"key": i.key, "required": i.required, "description": i.description.strip()} for i in cfg.inputs],
        "contacts": [
            {"role": c.role, "required": c.required, "channels": list(cfg.contact_channels(c))} for c in cfg.contacts
        ],
        "tasks": [_task(task) for task in cfg.tasks],
        "followup": _followup(cfg.followup),
        "cadence": _cadence(cfg.cadence, followup=cfg.followup),
        "compliance": _compliance(cfg.compliance),
        "approvals": {"outbound": cfg.approvals.outbound,
                      "channels": {c: cfg.approvals.channels[c] for c in CHANNELS if c in cfg.approvals.channels}},
        "acknowledge": cfg.acknowledge,
        "tools": tool_schemas.build(cfg),
        "model": compile_model(cfg.model),
        "evals": [_eval(case) for case in cfg.evals],
    }


def config_hash(plan: dict) -> str:
    """sha256 hex of the plan's canonical JSON: equal plans, equal hashes."""
    canonical = json.dumps(plan, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _task(task: TaskSpec) -> dict:
    done_when = task.done_when.model_dump(by_alias=True)
    if "content_types" in done_when:
        done_when["content_types"] = sorted(set(done_when["content_types"]))
    return {
        "key": task.key,
        "title": task.title.strip(),
        "contact_role": task.contact_role,
        "required": task.required,
        "done_when": done_when,
    }


def _followup(followup: FollowupSpec) -> dict:
    ladder = [
        {"step": i, "channel": s.channel, "delay_s": s.delay.seconds, "delay_business_days": s.delay.business_days}
        for i, s in enumerate(followup.steps)
    ]
    return {
        "timezone_source": followup.timezone_source,
        "timezone": followup.timezone if followup.timezone_source == "fixed" else None,
        "business_days": sorted({WEEKDAYS.index(day) for day in followup.business_days}),
        "business_hours": followup.business_hours.model_dump(),
        "ladder": ladder,
        "max_attempts": followup.max_attempts or len(ladder),
        "on_exhausted": followup.on_exhausted,
        "on_reply": followup.on_reply,
        "reply_grace_s": followup.reply_grace,
        "escalation_sla_s": followup.escalation_sla,
        "holidays": sorted(followup.holidays),
        "promise_grace": {"delay_s": followup.promise_grace.seconds,
                          "delay_business_days": followup.promise_grace.business_days},
    }


def _cadence(cadence: CadenceSpec | None, *, followup: FollowupSpec) -> dict | None:
    if cadence is None:
        return None
    until = cadence.until or {}
    return {
        "every_s": cadence.every,
        "on": WEEKDAYS.index(cadence.on) if cadence.on is not None else None,
        "at": cadence.at or followup.business_hours.start,
        "until_date": until.get("date"),
        "until_s": until.get("after_s"),
        "escalate_after": cadence.escalate_after,
    }


def _compliance(compliance: ComplianceSpec) -> dict:
    domains = sorted(set(compliance.allowed_recipients.email_domains))
    return {
        "quiet_hours": compliance.quiet_hours.model_dump() if compliance.quiet_hours else None,
        "per_contact_caps": compliance.per_contact_caps.model_dump(),
        "opt_out_text": {channel: text.strip() for channel, text in compliance.opt_out_text.items()},
        "forbidden_phrases": list(dict.fromkeys(phrase.strip() for phrase in compliance.forbidden_phrases)),
        "allowed_recipients": {"run_contacts": True, "email_domains": domains} if domains else "run_contacts",
    }


def _eval(case: EvalCase) -> dict:
    return {
        "name": case.name,
        "description": case.description.strip(),
        "weeks": case.weeks,
        "goal": case.goal,
        "inputs": dict(case.inputs),
        "personas": {role: _persona(persona) for role, persona in case.personas.items()},
        "start": case.start,
        "approvals": [step.model_dump() for step in case.approvals],
        "human": [step.model_dump() for step in case.human],
        "faults": [window.model_dump() for window in case.faults],
        "expect": _expect(case),
    }


def _persona(persona: Persona) -> dict:
    normalized = persona.model_dump(exclude={"traits"})
    normalized["traits"] = [_trait(trait.model_dump()) for trait in persona.traits]
    return normalized


def _trait(trait: dict) -> dict:
    kind = trait.pop("type")
    if kind == "answers_call":
        # One transcript is a list of one: the nth call says the nth entry, the last one after that.
        trait["transcripts"] = [trait.pop("transcript")] if trait.get("transcript") else trait["transcripts"]
    # sends_attachment is a spelling of replies_after; consumers handle one type.
    return {"type": "replies_after" if kind == "sends_attachment" else kind, **trait}


def _expect(case: EvalCase) -> dict:
    expect = case.expect.model_dump()
    expect["uses_channels"] = [channel for channel in CHANNELS if channel in expect["uses_channels"]]
    expect["open_tasks"] = sorted(set(expect["open_tasks"]))
    return expect
