"""Run one eval case: a normal run with `sim=True`, personas as its contacts, weeks of virtual time.

    result = engine.run_case(version, case, organization=org, seed=0)

The organization should hold only sandbox identities (simulator.sim_org);
the runtime sends a simulated run's messages through the sandbox connector
whatever it holds, and the scheduler stops with RealSendError if a send ever
reports a real provider.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db import connection

from agents.models import AgentVersion, Organization
from runs import starts, timeline
from runs.models import EpisodeStatus, RunStatus, TaskStatus
from simulator import expectations, faults, human_answers, personas, run_facts, scheduler

DEFAULT_WEEKS = 6
# A Monday that is the last day of its month, so day N of a simulation is the Nth of the next month and a
# persona's "out until the 10th" agrees with its `until_day: 10`. No daylight-saving change falls in the
# following weeks in either hemisphere's usual zones, so six weeks keep one UTC offset.
DEFAULT_START = (2029, 12, 31)
START_TIME = time(9, 0)
DAY = timedelta(days=1)
# The episodes a scorecard counts: those that ran to an end.
EPISODES_RUN = (EpisodeStatus.DONE, EpisodeStatus.FAILED)


@dataclass
class CaseResult:
    name: str
    passed: bool
    reasons: list[str]
    metrics: dict
    run_id: int
    timeline: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def run_case(
    version: AgentVersion,
    case: dict,
    *,
    organization: Organization,
    seed: int = 0,
    weeks: int | None = None,
    start_at: datetime | None = None,
    progress: Callable[[float], None] | None = None,
) -> CaseResult:
    """Simulate `case` (one entry of version.compiled["evals"]) and check its expectations."""
    with commits_unflushed():
        return _run_case(version, case, organization=organization, seed=seed, weeks=weeks, start_at=start_at,
                         progress=progress)


@contextlib.contextmanager
def commits_unflushed() -> Iterator[None]:
    """The session's commits do not wait for the WAL to reach the disk (synchronous_commit off) meanwhile.

    Durability is a real-time need: a crash would lose at most the last moments of a simulation nobody reads
    before it has finished, and it is simulated again; never a half-written row, and the statements are
    production's. The session's own setting comes back after (unless the caller's transaction is already
    broken: its rollback undoes the change)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('synchronous_commit'), set_config('synchronous_commit', 'off', false)")
        previous = cursor.fetchone()[0]
    try:
        yield
    finally:
        if not connection.needs_rollback:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('synchronous_commit', %s, false)", [previous])


def _run_case(version: AgentVersion, case: dict, *, organization: Organization, seed: int, weeks: int | None,
              start_at: datetime | None, progress: Callable[[float], None] | None) -> CaseResult:
    plan = version.compiled or {}
    zone = ZoneInfo(organization.default_timezone)
    start = start_at or case_start(case, organization=organization)
    if start.tzinfo is None:  # a naive start means the organization's wall clock
        start = start.replace(tzinfo=zone)
    weeks = weeks or case.get("weeks") or DEFAULT_WEEKS
    horizon = start + timedelta(weeks=weeks)
    # hash() of a str changes per process; a digest keeps "same seed, same transcript" across processes.
    rng = random.Random(seed ^ _stable_hash(case["name"]))
    cast = personas.cast_for(plan, case, start=start, rng=rng, token=uuid.uuid4().hex[:8],
                             default_tz=organization.default_timezone, writer=personas.llm_writer(plan))
    run = starts.start_run(
        organization, version=version, goal=case.get("goal") or _goal(plan, case), contacts=cast.contacts(),
        inputs=_inputs(plan, case), sim=True, virtual_now=start, external_ref=f"sim:{case['name']}:{seed}",
    )
    human = human_answers.Human(case.get("human"))
    with faults.armed(run.pk, faults.windows_for(case.get("faults") or [], start=start, zone=zone)):
        report = scheduler.SimScheduler(run, cast=cast, horizon=horizon, progress=progress,
                                        approvals=case.get("approvals"), human=human).run()
    facts = run_facts.gather(run, start=start, opt_outs=report.opt_outs, horizon=horizon)
    reasons = expectations.check(case.get("expect") or {}, facts) + _script_reasons(report, human)
    metrics = {**_metrics(facts), "approvals": report.approvals, "human_answers": len(human.answers),
               "redeliveries": sum(1 for d in report.deliveries if d.action.redelivery)}
    return CaseResult(name=case["name"], passed=not reasons, reasons=reasons, metrics=metrics,
                      run_id=run.pk, timeline=_timeline(facts, cast=cast, report=report, human=human))


def default_start(organization: Organization) -> datetime:
    """The fixed Monday 09:00 in the organization's zone: the same seed gives the same transcript."""
    return datetime(*DEFAULT_START, START_TIME.hour, START_TIME.minute, tzinfo=ZoneInfo(organization.default_timezone))


def case_start(case: dict, *, organization: Organization) -> datetime:
    """09:00 on the case's `start` date in the organization's zone; the default start without one."""
    if not case.get("start"):
        return default_start(organization)
    return datetime.combine(date.fromisoformat(case["start"]), START_TIME,
                            tzinfo=ZoneInfo(organization.default_timezone))


def _script_reasons(report: scheduler.SchedulerReport, human: human_answers.Human) -> list[str]:
    """What the case scripted but the runtime refused or mishandled: a redelivery not deduped, a refused answer."""
    reasons = [f"redelivery: the persona's message {d.action.number} was delivered twice and {d.note}"
               for d in report.deliveries if d.duplicated]
    reasons += [f"human[{answer.step}]: {answer.option} on the {answer.escalation_kind} escalation was refused: "
                f"{answer.error}" for answer in human.answers if answer.error]
    return reasons


def _metrics(facts: run_facts.Facts) -> dict:
    run, required = facts.run, [t for t in facts.tasks if t.required]
    done = bool(required) and all(t.status == TaskStatus.DONE for t in required)
    days_to_done = None
    if done:
        days_to_done = round((max(t.done_at for t in required) - facts.start) / DAY, 2)
    elif run.status == RunStatus.COMPLETED and run.ended_at:
        days_to_done = round((run.ended_at - facts.start) / DAY, 2)
    return {
        "days_to_done": days_to_done,
        "messages": len(facts.sent),
        "messages_by_channel": dict(sorted(Counter(m.channel for m in facts.sent).items())),
        "escalations": len(facts.escalations),
        "escalation_kinds": [e.kind for e in facts.escalations],
        "tokens": run.tokens_used,
        "cost_usd": str(run.cost_used),
        "episodes": sum(1 for episode in facts.episodes if episode.status in EPISODES_RUN),
        "final_status": run.status,
        "policy_violations": len(expectations.policy_violations(facts)),
        "quiet_hour_sends": len(expectations.quiet_hour_sends(facts)),
        "duplicate_sends": len(expectations.duplicate_sends(facts)),
    }


def _timeline(facts: run_facts.Facts, *, cast: personas.Cast, report: scheduler.SchedulerReport,
              human: human_answers.Human) -> list[dict]:
    """The run's story by calendar day in the organization's zone (day 0: the start date).

    Addresses read as roles: they carry a per-run token (personas.cast_for).
    Persona messages that became no episode (keywords, redeliveries, triage)
    and the scripted human's refused answers are shown with why.
    """
    labels = {address: f"{contact.role} <{contact.name}>" for contact in facts.contacts
              for channel in run_facts.ADDRESS_FIELD for address in run_facts.addresses(contact, channel)}
    zone = ZoneInfo(facts.run.organization.default_timezone)
    rows = []
    for item in timeline.timeline_of(facts.episodes, facts.outbox, facts.every_escalation):
        summary = item.summary
        if item.type == "outbound":
            summary = re.sub(r"^→ (\S+)", lambda m: f"→ {labels.get(m.group(1), m.group(1))}", summary)
        rows.append(_row(facts, zone, at=item.at, type=item.type, kind=item.kind, channel=item.channel,
                         direction=item.direction, summary=summary))
    for delivery in report.deliveries:
        if delivery.episode_id is None:  # keywords, redeliveries and triaged messages never became episodes
            action = delivery.action
            rows.append(_row(facts, zone, at=action.at, type="persona", kind=action.kind, channel=action.channel,
                             direction="in", summary=f"{action.role}: {action.text} ({delivery.note})"))
    for answer in human.answers:
        if answer.error:
            rows.append(_row(facts, zone, at=answer.at, type="human", kind=answer.option, channel="",
                             direction="in", summary=f"the scripted human's {answer.option} was refused: "
                                                     f"{answer.error}"))
    return sorted(rows, key=lambda row: row["at"])


def _row(facts: run_facts.Facts, zone: ZoneInfo, *, at: datetime, **fields) -> dict:
    # `day` is the calendar day in the organization's zone, as the expectations count it; UTC isoformat sorts
    # as text in time order; `local` is what a person reads.
    return {"day": facts.day(at), "at": at.astimezone(UTC).isoformat(),
            "local": at.astimezone(zone).strftime("%a %H:%M %Z"), **fields}


def _goal(plan: dict, case: dict) -> str:
    return plan.get("description") or f"Simulated case {case['name']}"


def _inputs(plan: dict, case: dict) -> dict:
    """The case's inputs; a required input it leaves out gets the example from its description, if any."""
    inputs = dict(case.get("inputs") or {})
    for spec in plan.get("inputs") or []:
        if spec["key"] not in inputs and spec.get("required", True):
            example = re.search(r'e\.g\.\s*"?([^"]+?)"?\.?\s*$', spec.get("description") or "")
            inputs[spec["key"]] = example.group(1) if example else f"example {spec['key'].replace('_', ' ')}"
    return inputs


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
