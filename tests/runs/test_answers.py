"""Each typed answer end to end, through the API and a Studio POST, down to the sends that follow (or not)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from connectors import suppressions
from connectors.models import Suppression
from runs import answers, escalations, events, leases, prompts
from runs.models import (
    Contact,
    Episode,
    EpisodeKind,
    Escalation,
    JournalEntry,
    OutboxMessage,
    Run,
    RunStatus,
    Task,
)
from tests.runs import answer_helpers as a
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db
BOTH = pytest.mark.parametrize("via", ["api", "admin"])


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_GUARDRAIL_MODEL = ""


@pytest.fixture
def world():
    world = a.make_world()
    yield world
    world.twilio.stop()
    world.mailgun.stop()


def _journaled(run: Run, option: str) -> dict:
    entry = JournalEntry.objects.get(run=run, kind="note", data__human_answer=option)
    return entry.data


@BOTH
def test_handle_myself_stops_all_outreach_until_handed_back(world, via):
    run = a.start(world)
    assert len(world.emails()) == 1
    question = a.open_question(run)

    assert a.acted(via, a.answer(via, question, "handle_myself"))

    run = Run.objects.get(pk=run.pk)
    handoff = Escalation.objects.get(run=run, kind="handoff", status="open")
    assert (run.status, run.wake_when) == (RunStatus.WAITING_HUMAN, f"human:{handoff.pk}")
    assert _journaled(run, "handle_myself")["owner"]["via"] == via
    # The vendor writes in: the agent would answer, but the run is the human's now: nothing goes out.
    events.record_event(run, kind=EpisodeKind.INBOUND, dedupe_key="reply-1",
                        payload={"channel": "email", "from": h.VENDOR_EMAIL, "text": "Ok, will do."})
    a.drain(run)
    assert len(world.emails()) == 1 and world.texts() == 0
    assert JournalEntry.objects.filter(run=run, kind="policy_block", data__rule="handled_by_human").exists()

    # Handing back: the ladder carries on (the options on the handoff are hand back, mark done, stop).
    assert {o["name"] for o in handoff.options} >= {"resume", "mark_done", "stop_run"}
    assert a.acted(via, a.answer(via, handoff, "resume"))
    assert Run.objects.get(pk=run.pk).status == RunStatus.ACTIVE


@BOTH
def test_stop_run_cancels_with_the_reason_and_who(world, via):
    question = a.open_question(world.run)

    assert a.acted(via, a.answer(via, question, "stop_run", text="vendor relationship ended"))

    run = Run.objects.get(pk=world.run.pk)
    assert (run.status, run.outcome) == (RunStatus.CANCELLED, "vendor relationship ended")
    assert (run.cancelled_by_key_id is not None) == (via == "api")
    assert (run.cancelled_by_id is not None) == (via == "admin")
    assert world.emails() == [] and _journaled(run, "stop_run")["outcome"] == "cancelled"


@BOTH
def test_mark_done_is_the_human_confirmation_and_completes_the_run(world, via):
    question = a.open_question(world.run)

    assert a.acted(via, a.answer(via, question, "mark_done", text="W-9 came in by fax"))

    task = Task.objects.get(run=world.run, key="collect_w9")
    assert task.status == "done"
    assert task.done_evidence["check"] == "human_confirmation"
    assert task.done_evidence["note"] == "W-9 came in by fax" and task.done_evidence["by"]["via"] == via
    assert task.done_at is not None
    assert a.drain(world.run).status == RunStatus.COMPLETED
    assert world.emails() == []


@BOTH
def test_retry_runs_the_failed_episode_again(world, via):
    failed = Episode.objects.create(run=world.run, seq=1, kind="start", dedupe_key="start", payload={},
                                    due_at=world.run.created_at, status="failed", attempts=3)
    stuck = a.open_question(world.run, kind="stuck", prompt="Episode #1 failed after 3 attempts", episode=failed)
    assert "retry" in {o["name"] for o in stuck.options}

    assert a.acted(via, a.answer(via, stuck, "retry"))

    again = Episode.objects.get(run=world.run, dedupe_key=f"retry:{stuck.pk}")
    assert (again.kind, again.status) == ("start", "queued")
    a.drain(world.run)
    assert Episode.objects.get(pk=again.pk).status == "done"
    assert len(world.emails()) == 1  # the start episode's first email, sent this time


@BOTH
def test_use_contact_makes_the_new_address_the_one_the_next_message_goes_to(world, via):
    question = a.open_question(world.run, prompt="Dana says accounts@whitfield.example handles this. Use it?")

    assert a.acted(via, a.answer(via, question, "use_contact", text="their accounts team",
                                 data={"address": "Accounts@Whitfield.example"}))

    contact = Contact.objects.get(run=world.run, role="vendor")
    assert contact.email == "accounts@whitfield.example"
    change = next(e for e in contact.history if e["kind"] == "address")
    assert (change["old"], change["new"], change["by"]["via"]) == (h.VENDOR_EMAIL, "accounts@whitfield.example", via)
    a.drain(world.run)
    events.record_event(world.run, kind=EpisodeKind.FOLLOWUP, dedupe_key="next", payload={"step": 1,
                                                                                         "channel": "email"})
    a.drain(world.run)
    sent = a.sent_rows(world.run)
    assert [row.recipient for row in sent] == ["accounts@whitfield.example"]
    assert world.emails()[0].first("to").endswith("accounts@whitfield.example")


@BOTH
def test_switch_channel_moves_the_ladder_to_sms_from_then_on(world, via):
    run = a.start(world)  # the first email; the ladder's next step is email too
    question = a.open_question(run)

    assert a.acted(via, a.answer(via, question, "switch_channel", data={"channel": "sms"}))
    run = a.drain(run)

    followup = Episode.objects.get(run=run, kind="followup", status="queued")
    assert followup.payload["channel"] == "sms"
    Episode.objects.filter(pk=followup.pk).update(due_at=run.created_at)
    Run.objects.filter(pk=run.pk).update(next_wake_at=run.created_at)
    a.drain(run)
    assert world.texts() == 1 and len(world.emails()) == 1


def _blocked(world) -> Escalation:
    episode = h.add_episode(world.run, "inbound", {"channel": "email", "from": h.VENDOR_EMAIL, "text": "ok"})
    epoch = h.claim(world.run)
    result, _ = s.dispatch(world.run, episode, "send_email",
                           {**s.EMAIL, "body": "Send the W-9 and we will pay your invoice today."}, epoch=epoch)
    leases.release(world.run.pk, epoch=epoch)
    a.finish_episode(episode)
    assert result["status"] == "blocked"
    return Escalation.objects.get(run=world.run, kind="guardrail_block")


@BOTH
def test_send_anyway_sends_the_exact_blocked_message_once_as_a_human_override(world, via):
    blocked = _blocked(world)
    assert "send_anyway" in {o["name"] for o in blocked.options}

    assert a.acted(via, a.answer(via, blocked, "send_anyway", text="the payment is approved"))
    a.drain(world.run)
    a.drain(world.run)

    [row] = OutboxMessage.objects.filter(run=world.run)
    assert (row.status, row.human_override, row.recipient) == ("sent", True, h.VENDOR_EMAIL)
    assert row.payload == blocked.context["payload"]
    [call] = world.emails()
    assert "we will pay your invoice today" in call.first("text")


@BOTH
def test_reply_to_contact_needs_a_confirmed_preview_then_sends_the_text_as_written_once(world, via):
    question = a.open_question(world.run)
    text = "Hi Dana, the $25 fee is fine; please send the W-9 when you can."

    first = a.answer(via, question, "reply_to_contact", text=text)
    if via == "api":
        assert first.status_code == 400
        assert first.json()["preview"]["payload"]["body"] == text and first.json()["preview"]["to"] == h.VENDOR_EMAIL
    else:
        assert first.status_code == 200 and text in first.content.decode() and b"Confirm and send" in first.content
    assert Escalation.objects.get(pk=question.pk).status == "open" and world.emails() == []

    assert a.acted(via, a.answer(via, question, "reply_to_contact", text=text, data={"confirm": True}))
    a.drain(world.run)
    a.drain(world.run)

    [row] = OutboxMessage.objects.filter(run=world.run)
    assert (row.status, row.payload["body"], row.human_override) == ("sent", text, False)
    [call] = world.emails()
    assert call.first("text").startswith(text)


@BOTH
def test_guide_agent_is_read_by_the_next_episode_and_never_sent(world, via):
    question = a.open_question(world.run)
    guidance = "Mention that the form can be signed electronically"

    assert a.acted(via, a.answer(via, question, "guide_agent", text=guidance))
    a.drain(world.run)

    assert world.emails() == [] and not OutboxMessage.objects.filter(payload__body__contains=guidance).exists()
    episode = events.record_event(world.run, kind=EpisodeKind.FOLLOWUP, dedupe_key="f", payload={"step": 1})
    ctx = h.context(world.run, episode, epoch=h.claim(world.run))
    described = prompts.messages(ctx, prompts.metadata(ctx, now=ctx.now))[1]["content"]
    assert guidance in described and "never send it" in described


@BOTH
def test_stop_contacting_on_sms_means_no_sms_in_any_run_of_the_organization(world, via):
    question = a.open_question(world.run)

    assert a.acted(via, a.answer(via, question, "stop_contacting", data={"channels": ["sms"]}))

    assert suppressions.is_suppressed(world.run.organization, channel="sms", address="+15555550101")
    assert not Suppression.objects.filter(channel="email").exists()
    run = Run.objects.get(pk=world.run.pk)
    assert run.status == RunStatus.ACTIVE  # still reachable by email: the run goes on
    assert Contact.objects.get(run=run).history[-1]["kind"] == "opt_out"
    other = s.real_run(s.open_plan(per_contact_caps={}), organization=run.organization)
    for chased in (run, other):
        episode = h.add_episode(chased, "followup")
        result, _ = s.dispatch(chased, episode, "send_sms", s.SMS)
        assert result["status"] == "blocked"
    assert world.texts() == 0


def test_stop_contacting_on_every_channel_ends_the_run_quietly(world):
    question = a.open_question(world.run)

    assert a.acted("api", a.answer("api", question, "stop_contacting", text="asked us by phone to stop"))

    run = Run.objects.get(pk=world.run.pk)
    assert run.status == RunStatus.CANCELLED and "nobody left to contact" in run.outcome
    assert set(Suppression.objects.filter(organization=run.organization).values_list("channel", flat=True)) == {
        "email", "sms", "voice"}


# Refusals ------------------------------------------------------------------------------------------------------


@BOTH
def test_an_option_that_does_not_fit_is_refused_naming_the_ones_that_do(world, via):
    question = a.open_question(world.run)

    response = a.answer(via, question, "send_anyway")

    if via == "api":
        assert response.status_code == 400
        assert "does not fit" in response.json()["detail"] and "handle_myself" in response.json()["detail"]
    else:
        assert response.status_code == 200 and b"does not fit" in response.content
    assert Escalation.objects.get(pk=question.pk).status == "open"


@BOTH
def test_an_empty_answer_is_refused(world, via):
    question = a.open_question(world.run)

    response = a.answer(via, question, "")

    if via == "api":
        assert response.status_code == 400 and "choose an option" in response.json()["detail"]
    else:
        assert response.status_code == 200 and b"choose an option" in response.content.lower()
    assert Escalation.objects.get(pk=question.pk).status == "open"
    assert not Episode.objects.filter(run=world.run, kind="human_answer").exists()


def test_refusals_name_what_is_missing(world):
    question = a.open_question(world.run)
    for option, data, expected in [
        ("guide_agent", {}, "needs text"),
        ("switch_channel", {"channel": "fax"}, "data.channel"),
        ("use_contact", {"address": "not an address"}, "not a valid"),
        ("stop_contacting", {"channels": "sms"}, "data.channels"),
    ]:
        with pytest.raises(answers.AnswerRefused, match=expected):
            answers.answer(question, option=option, data=data, via="api")
    assert Escalation.objects.get(pk=question.pk).status == "open"


def test_every_option_offered_is_one_the_registry_acts_on():
    for kind in ("question", "stuck", "guardrail_block", "uncertain_send", "unmatched_inbound",
                 "provider_outage", "handoff"):
        for option in answers.options_for(Escalation(kind=kind, context={})):
            assert answers.answer_options.get(option["name"]) is not None and option["label"]


@pytest.mark.django_db(transaction=True)
def test_a_double_submitted_answer_acts_once(settings):
    settings.LUCIA_LLM = "scripted"
    run = h.make_run()
    question = a.open_question(run)
    results: list[str] = []
    barrier = threading.Barrier(2)

    def submit() -> None:
        barrier.wait()
        try:
            answers.answer(Escalation.objects.get(pk=question.pk), option="stop_run", text="twice", via="api")
            results.append("acted")
        except escalations.EscalationClosed:
            results.append("closed")
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == ["acted", "closed"]
    assert JournalEntry.objects.filter(run=run, data__human_answer="stop_run").count() == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_a_double_submitted_api_answer_is_a_409(world):
    question = a.open_question(world.run)
    assert a.answer("api", question, "resume").status_code == 200
    assert a.answer("api", question, "resume").status_code == 409
    assert Episode.objects.filter(run=world.run, kind="human_answer").count() == 1


def test_the_schema_documents_each_option_of_an_answer(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    body = schema["paths"]["/api/v1/escalations/{id}/answer/"]["post"]["requestBody"]["content"]["application/json"]
    properties = schema["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[1]]["properties"]
    option = properties["option"]
    refs = [part["$ref"].rsplit("/", 1)[1] for part in option["oneOf"]]
    names = {name for ref in refs for name in schema["components"]["schemas"][ref]["enum"]}
    assert {"stop_contacting", "handle_myself", "stop_run", "mark_done", "retry", "use_contact", "switch_channel",
            "send_anyway", "guide_agent", "reply_to_contact", "resume"} <= names
    assert "`reply_to_contact`" in option["description"] and "confirm" in option["description"]
    assert {"text", "data"} <= set(properties)


@pytest.mark.parametrize(("option", "status"), [("sent", "sent"), ("not_sent", "pending")])
def test_an_uncertain_send_is_settled_by_its_typed_options(world, option, status):
    episode = h.add_episode(world.run, "start")
    a.finish_episode(episode)
    row = OutboxMessage.objects.create(idem_key=f"k-{option}", run=world.run, episode=episode, tool="send_email",
                                       channel="email", recipient=h.VENDOR_EMAIL, status="uncertain",
                                       created_at=world.run.created_at)
    question = a.open_question(world.run, kind="uncertain_send", prompt="Was it sent?", outbox_message=row)

    assert a.answer("api", question, option).status_code == 200

    assert OutboxMessage.objects.get(pk=row.pk).status == status
    assert Escalation.objects.get(pk=question.pk).status == "resolved"
