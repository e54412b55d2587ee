"""Set up one run of the document-collector template and run its episodes through the real agent loop."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path

from django.db import connection

from agents.config.compiler import compile_config
from agents.config.validation import validate_source
from connectors import attachments
from runs import clock, lease_renewals, leases
from runs.context import EpisodeContext
from runs.llm.base import ChatRequest, ModelReply
from runs.llm.scripted import ScriptedProvider
from runs.models import Contact, Episode, Run, Task
from simulator import documents
from tests.factories import ContactFactory, EpisodeFactory, RunFactory, TaskFactory, plan_version

TEMPLATE = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "document-collector.yaml"
# Tuesday 10:00 in Chicago: inside business hours, outside quiet hours.
BUSINESS_HOURS = datetime(2025, 3, 4, 16, 0, tzinfo=UTC)
VENDOR_EMAIL = "dana@whitfield-supplies.example"
# A real one-page PDF: evidence counts only stored bytes that are what they claim to be.
PDF = attachments.Upload(filename="w9-signed.pdf", content=documents.pdf_bytes(title="W-9, signed"),
                         declared_type="application/pdf")


@functools.cache
def _template_plan() -> dict:
    result = validate_source(TEMPLATE.read_text())
    assert result.ok, result.as_dict()
    return compile_config(result.config)


def template_plan(**overrides) -> dict:
    import copy

    return {**copy.deepcopy(_template_plan()), **overrides}


def make_run(plan: dict | None = None, *, now: datetime = BUSINESS_HOURS, **fields) -> Run:
    """A simulated run (virtual clock at `now`) with the vendor contact and the plan's tasks."""
    plan = plan or template_plan()
    run = RunFactory(version=plan_version(plan), plan=plan, sim=True, virtual_now=now, **fields)
    ContactFactory(run=run, role="vendor", name="Dana Whitfield", email=VENDOR_EMAIL, phone="+1 555 555 0101",
                   timezone="America/Chicago")
    for task in plan["tasks"]:
        TaskFactory(run=run, key=task["key"], title=task["title"], required=task["required"])
    return run


def add_episode(run: Run, kind: str, payload: dict | None = None) -> Episode:
    return EpisodeFactory(run=run, kind=kind, payload=payload or {}, due_at=run.virtual_now or clock.now(run))


def inbound(run: Run, text: str, *, files: list[attachments.Upload] | None = None,
            sender: str = VENDOR_EMAIL) -> Episode:
    """A reply from `sender` (the vendor by default) whose files are stored as a webhook would store them."""
    stored = attachments.store_for_run(run.pk, organization_id=run.organization_id, uploads=files or [])
    payload = {"channel": "email", "from": sender, "subject": "Re: W-9", "text": text,
               "attachments": [attachments.describe(row) for row in stored]}
    return add_episode(run, "inbound", payload)


def claim(run: Run, *, owner: str = "test-worker") -> int:
    epoch = leases.claim(run.pk, owner=owner)
    assert epoch is not None
    return epoch


def lose_claims(monkeypatch) -> None:
    """Each claim (runs.leases.claim) is taken and at once handed to `successor` with the same epoch: a claim a
    database crash took back, whose epoch the next claim got again."""
    claim = leases.claim

    def claimed_then_lost(run_id: int, *, owner: str) -> int | None:
        epoch = claim(run_id, owner=owner)
        Run.objects.filter(pk=run_id).update(lease_owner="successor")
        return epoch

    monkeypatch.setattr(leases, "claim", claimed_then_lost)


def hold_lease(run: Run, *, seconds: int, epoch: int = 1) -> None:
    """Give the run a lease (owner `w`) that expires `seconds` from now (negative: already expired), on the
    database's clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET lease_owner = 'w', lease_epoch = %s,"
            " lease_expires_at = now() + make_interval(secs => %s) WHERE id = %s",
            [epoch, seconds, run.pk],
        )


def context(run: Run, episode: Episode, *, epoch: int, heartbeat: lease_renewals.Heartbeat | None = None,
            owner: str | None = None) -> EpisodeContext:
    """What runs.execution builds for the loop, read fresh from the database (`owner`: the lease's, or any)."""
    fresh = Run.objects.select_related("organization", "version").get(pk=run.pk)
    return EpisodeContext(
        run_id=run.pk, epoch=epoch, episode=Episode.objects.get(pk=episode.pk), run=fresh, plan=fresh.plan,
        contacts=list(Contact.objects.filter(run_id=run.pk)), tasks=list(Task.objects.filter(run_id=run.pk)),
        now=clock.now(fresh), heartbeat=heartbeat, owner=owner,
    )


class CountingProvider:
    """The scripted model, counting the calls that reached it (replays never do)."""

    name = "scripted"

    def __init__(self, inner=None) -> None:
        self.inner = inner or ScriptedProvider()
        self.calls = 0

    def complete(self, request: ChatRequest) -> ModelReply:
        self.calls += 1
        return self.inner.complete(request)


def use_provider(monkeypatch, provider) -> None:
    monkeypatch.setattr("runs.llm.providers.provider_for", lambda plan: provider)
