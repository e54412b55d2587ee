"""A real run with email and SMS senders on local provider fakes, escalations on it, and answers via API or Studio."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from connectors.models import Channel
from runs import escalations, leases, worker
from runs.models import Episode, EpisodeStatus, Escalation, OutboxMessage, Run
from tests.factories import api_key_for
from tests.fakes.esp_server import MailgunServer
from tests.fakes.twilio_server import TwilioServer
from tests.runs import send_helpers as s


@dataclass
class World:
    run: Run
    twilio: TwilioServer
    mailgun: MailgunServer

    def emails(self) -> list:
        return self.mailgun.calls_to("/messages", method="POST")

    def texts(self) -> list:
        return s.creates(self.twilio)


def make_world() -> World:
    twilio, mailgun = s.start_twilio(), s.start_mailgun()
    # No per-contact caps: the counts below are the sends the answers cause, nothing held back.
    plan = s.open_plan(per_contact_caps={})
    # Every reply may be answered: the replies below stand for any message the agent would send.
    plan["acknowledge"] = "every_reply"
    run = s.real_run(plan)
    s.sms_identity(run.organization, twilio)
    s.email_identity(run.organization, mailgun)
    return World(run=run, twilio=twilio, mailgun=mailgun)


def open_question(run: Run, *, kind: str = "question", prompt: str = "The vendor asks for a fee. Pay it?",
                  **fields) -> Escalation:
    epoch = leases.claim(run.pk, owner="test")
    try:
        with leases.fence(run.pk, epoch=epoch) as locked:
            return escalations.open_escalation(locked, kind=kind, prompt=prompt, **fields)
    finally:
        leases.release(run.pk, epoch=epoch)


def drain(run: Run) -> Run:
    """Run every due episode, as the worker does."""
    for _ in range(6):
        if not worker.advance_run(run.pk):
            break
    return Run.objects.get(pk=run.pk)


def start(world: World) -> Run:
    """The start episode: the ladder's first email goes out."""
    Episode.objects.create(run=world.run, seq=1, kind="start", dedupe_key="start", payload={},
                           due_at=world.run.created_at)
    return drain(world.run)


def studio(user_name: str = "ops") -> Client:
    client = Client()
    user = User.objects.filter(username=user_name).first() or User.objects.create_superuser(
        user_name, f"{user_name}@example.com", "pw")
    client.force_login(user)
    return client


def answer(via: str, escalation: Escalation, option: str, *, text: str = "", data: dict | None = None):
    """Answer through the API (200 expected) or a Studio POST (302 expected); returns the response."""
    data = data or {}
    if via == "api":
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(escalation.organization)}")
        return client.post(f"/api/v1/escalations/{escalation.pk}/answer/",
                           {"option": option, "text": text, "data": data}, format="json")
    form = {"_option": option, "text": text,
            **{key: value for key, value in data.items() if key not in ("confirm", "channels")}}
    if data.get("confirm"):
        form["confirm"] = "on"
    if data.get("channels"):
        form["channels"] = data["channels"]
    return studio().post(f"/admin/runs/escalation/{escalation.pk}/change/", form)


def acted(via: str, response) -> bool:
    return response.status_code == (200 if via == "api" else 302)


def sent_rows(run: Run, channel: str = Channel.EMAIL) -> list[OutboxMessage]:
    return list(OutboxMessage.objects.filter(run=run, channel=channel, status="sent").order_by("pk"))


def finish_episode(episode: Episode) -> None:
    Episode.objects.filter(pk=episode.pk).update(status=EpisodeStatus.DONE)
