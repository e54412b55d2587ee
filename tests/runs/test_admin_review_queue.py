"""The escalation review queue in the Studio: order, SLA, filters, claim, option buttons through runs.answers,
preview and confirmation, refusals, bulk actions, permissions and organization scope."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.utils import timezone

from runs import escalations, review_queue
from runs.models import (
    Contact,
    Episode,
    Escalation,
    EscalationStatus,
    OutboxMessage,
    OutboxStatus,
    Run,
    RunStatus,
    Task,
)
from tests.factories import OrganizationFactory
from tests.runs import answer_helpers as a
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db
QUEUE = "/admin/runs/escalation/"
SUPPORT_PERMS = ("view_escalation", "change_escalation", "view_run")


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_GUARDRAIL_MODEL = ""


def _user(name: str, *, perms=SUPPORT_PERMS, organizations=()) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="runs", codename__in=perms))
    for organization in organizations:
        organization.staff.add(user)
    return user


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _page(escalation: Escalation) -> str:
    return f"{QUEUE}{escalation.pk}/change/"


def _aged(escalation: Escalation, *, hours: float) -> Escalation:
    Escalation.objects.filter(pk=escalation.pk).update(created_at=timezone.now() - timedelta(hours=hours))
    return Escalation.objects.get(pk=escalation.pk)


def _question(run: Run | None = None, *, hours: float = 0, **fields) -> Escalation:
    return _aged(a.open_question(run or s.real_run(), **fields), hours=hours)


def _listed(client: Client, query: str = "") -> list[int]:
    response = client.get(QUEUE + query)
    assert response.status_code == 200, response
    return [row.pk for row in response.context["cl"].result_list]


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []


# Order, SLA, filters --------------------------------------------------------------------------------------------


def test_the_queue_lists_open_escalations_first_oldest_first_then_the_closed_ones():
    organization = OrganizationFactory()
    newer = _question(s.real_run(organization=organization), hours=1)
    older = _question(s.real_run(organization=organization), hours=3)
    closed = _question(s.real_run(organization=organization), hours=9)
    escalations.cancel(closed, via="admin")
    client = _client(_user("sam", organizations=[organization]))

    assert _listed(client) == [older.pk, newer.pk, closed.pk]
    assert _listed(client, "?status=open") == [older.pk, newer.pk]
    assert _listed(client, "?status=closed") == [closed.pk]


def test_the_sla_is_the_agents_escalation_sla_and_breaches_are_marked_and_filtered():
    organization = OrganizationFactory()
    hourly = s.open_plan()
    hourly["followup"]["escalation_sla_s"] = 3600
    breached = _question(s.real_run(hourly, organization=organization), hours=2)
    within = _question(s.real_run(organization=organization), hours=2)  # the template's 4h
    assert review_queue.sla_due_at(breached) == breached.created_at + timedelta(
        seconds=escalations.sla_seconds(breached)) == breached.created_at + timedelta(hours=1)
    client = _client(_user("sam", organizations=[organization]))

    assert _listed(client, "?sla=breached") == [breached.pk]
    assert _listed(client, "?status=open&sla=within") == [within.pk]
    listing = client.get(QUEUE).content.decode()
    assert 'data-sla="breached">breached 1h 00m ago' in listing and 'data-sla="within">due in 1h 59m' in listing
    assert 'data-sla="breached"' in client.get(_page(breached)).content.decode()


def test_the_sla_column_sorts_by_deadline():
    organization = OrganizationFactory()
    hourly = s.open_plan()
    hourly["followup"]["escalation_sla_s"] = 3600
    later = _question(s.real_run(organization=organization), hours=2)  # 4h SLA: due in 2h
    sooner = _question(s.real_run(hourly, organization=organization), hours=0.5)  # 1h SLA: due in 30m
    client = _client(_user("sam", organizations=[organization]))

    assert _listed(client) == [later.pk, sooner.pk]  # oldest first
    assert _listed(client, "?o=3") == [sooner.pk, later.pk]  # the SLA column (the third, after the checkbox)


def test_a_run_less_escalation_gets_the_default_four_hour_sla():
    organization = OrganizationFactory()
    escalations.raise_outage(organization.pk, channel="sms", error="Twilio unreachable")
    outage = _aged(Escalation.objects.get(organization=organization), hours=5)
    client = _client(_user("sam", organizations=[organization]))

    assert _listed(client, "?sla=breached&kind=provider_outage") == [outage.pk]
    assert review_queue.sla_due_at(outage) == outage.created_at + timedelta(hours=4)


def test_filters_by_kind_organization_assignee_and_simulated_runs():
    first, second = OrganizationFactory(), OrganizationFactory()
    question = _question(s.real_run(organization=first))
    stuck = _question(s.real_run(organization=second), kind="stuck", prompt="The model failed")
    simulated = _question(h.make_run(organization=first))
    user = _user("sam", organizations=[first, second])
    escalations.claim(stuck, user=user)
    client = _client(user)

    assert _listed(client, "?kind=stuck") == [stuck.pk]
    assert _listed(client, f"?organization={first.pk}") == [question.pk]
    assert _listed(client, "?assignee=mine") == [stuck.pk]
    assert _listed(client, "?assignee=unassigned") == [question.pk]
    assert simulated.pk not in _listed(client)
    assert _listed(client, "?sim=only") == [simulated.pk]
    assert _listed(client, "?status=open&kind=stuck&sla=within") == [stuck.pk]


# Claim ----------------------------------------------------------------------------------------------------------


def test_claim_assigns_to_me_shows_in_the_list_and_a_colleague_cannot_take_it_until_unassigned():
    question = _question()
    sam = _user("sam", organizations=[question.organization])
    kim = _user("kim", organizations=[question.organization])

    response = _client(sam).post(_page(question), {"_claim": "1"}, follow=True)
    assert Escalation.objects.get(pk=question.pk).assignee == sam
    assert _messages(response) == [f"Escalation #{question.pk} is yours."]
    assert "<td class=\"field-assignee_name\">sam</td>" in _client(kim).get(QUEUE).content.decode()

    refused = _client(kim).post(_page(question), {"_claim": "1"}, follow=True)
    assert _messages(refused) == [f"escalation {question.pk} is claimed by sam; ask them, or unassign it first"]
    assert Escalation.objects.get(pk=question.pk).assignee == sam

    _client(kim).post(_page(question), {"_unassign": "1"})
    _client(kim).post(_page(question), {"_claim": "1"})
    assert Escalation.objects.get(pk=question.pk).assignee == kim


def test_a_closed_escalation_cannot_be_claimed():
    question = _question()
    escalations.cancel(question, via="admin")

    with pytest.raises(escalations.ClaimRefused, match="already cancelled"):
        escalations.claim(question, user=_user("sam"))


@pytest.mark.django_db(transaction=True)
def test_two_people_claiming_at_once_one_wins_and_the_other_is_told_who():
    question = _question()
    people = [_user("sam"), _user("kim")]
    barrier, results = threading.Barrier(2), {}

    def claim(user: User) -> None:
        barrier.wait()
        try:
            escalations.claim(Escalation.objects.get(pk=question.pk), user=user)
            results[user.username] = "claimed"
        except escalations.ClaimRefused as refused:
            results[user.username] = str(refused)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(user,)) for user in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winner = Escalation.objects.get(pk=question.pk).assignee.username
    loser = next(name for name in results if name != winner)
    assert results[winner] == "claimed"
    assert results[loser] == f"escalation {question.pk} is claimed by {winner}; ask them, or unassign it first"


# The page: context, recent messages, buttons --------------------------------------------------------------------


def test_the_page_shows_the_context_and_the_runs_recent_messages_inbound_and_outbound():
    run = s.real_run()
    episode = h.add_episode(run, "inbound", {"channel": "email", "from": h.VENDOR_EMAIL,
                                             "text": "Is there a fee for the W-9?"})
    OutboxMessage.objects.create(idem_key="sent-1", run=run, episode=episode, tool="send_email", channel="email",
                                 recipient=h.VENDOR_EMAIL, status="sent", created_at=timezone.now(),
                                 payload={"subject": "Your W-9", "body": "Hi Dana, the W-9 please."})
    question = _question(run, prompt="The vendor asks for a fee. Pay it?",
                         context={"reason": "fee_request", "amount": "$25"})

    page = _client(_user("sam", organizations=[run.organization])).get(_page(question)).content.decode()

    assert "The vendor asks for a fee. Pay it?" in page and "fee_request" in page and "$25" in page
    recent = page[page.index('id="recent-messages"'):]
    assert "Is there a fee for the W-9?" in recent and "Your W-9" in recent
    for option in ("guide_agent", "reply_to_contact", "stop_run", "use_contact", "switch_channel", "mark_done",
                   "stop_contacting", "handle_myself", "resume"):
        assert f'id="option-{option}"' in page, option


def test_a_guardrail_block_shows_the_blocked_message_and_send_anyway_sends_it_as_an_override():
    blocked = _question(kind="guardrail_block", prompt="The guardrail blocked a message", context={
        "tool": "send_email", "recipient": h.VENDOR_EMAIL, "rule": "promise",
        "payload": {"subject": "Payment", "body": "We will pay your invoice today."}})
    client = _client(_user("sam", organizations=[blocked.organization]))

    page = client.get(_page(blocked)).content.decode()
    panel = page[page.index('id="blocked-message"'):page.index('id="escalation-context"')]
    assert "We will pay your invoice today." in panel and h.VENDOR_EMAIL in panel
    client.post(_page(blocked), {"_option": "send_anyway"})

    [woken] = Episode.objects.filter(run=blocked.run, kind="human_answer")
    assert woken.payload["human_send"]["override"] is True
    assert woken.payload["human_send"]["payload"]["body"] == "We will pay your invoice today."


def test_guide_agent_wakes_the_run_with_the_guidance():
    question = _question()
    client = _client(_user("sam", organizations=[question.organization]))

    response = client.post(_page(question), {"_option": "guide_agent", "text": "Offer the e-signature link"},
                           follow=True)

    assert response.redirect_chain[-1][0].startswith(QUEUE)
    assert len([m for m in _messages(response) if "“Guide the agent” done" in m]) == 1
    [woken] = Episode.objects.filter(run=question.run, kind="human_answer")
    assert (woken.payload["option"], woken.payload["guidance"]) == ("guide_agent", "Offer the e-signature link")
    assert Escalation.objects.get(pk=question.pk).status == EscalationStatus.ANSWERED


def test_after_an_answer_the_queue_comes_back_with_its_filters():
    question = _question(kind="stuck", prompt="The model failed")
    client = _client(_user("sam", organizations=[question.organization]))
    filtered = "?_changelist_filters=status%3Dopen%26kind%3Dstuck"

    response = client.post(_page(question) + filtered, {"_option": "resume"})

    assert response.status_code == 302 and response["Location"] == QUEUE + "?status=open&kind=stuck"


def test_stop_run_cancels_the_run_with_the_reason():
    question = _question()
    client = _client(_user("sam", organizations=[question.organization]))

    client.post(_page(question), {"_option": "stop_run", "text": "The vendor left"})

    run = Run.objects.get(pk=question.run_id)
    assert run.status == RunStatus.CANCELLED and "The vendor left" in run.outcome


def test_data_options_take_their_inputs_use_contact_switch_channel_and_mark_done():
    run = s.real_run()
    client = _client(_user("sam", organizations=[run.organization]))
    [task_key] = Task.objects.filter(run=run, required=True).values_list("key", flat=True)[:1]

    client.post(_page(_question(run)), {"_option": "use_contact", "address": "ap@whitfield.example"})
    assert Contact.objects.get(run=run).email == "ap@whitfield.example"
    client.post(_page(_question(run)), {"_option": "switch_channel", "channel": "sms"})
    assert Contact.objects.get(run=run).history[-1]["kind"] == "preference"
    client.post(_page(_question(run)), {"_option": "mark_done", "task_key": task_key, "text": "came by fax"})
    assert Task.objects.get(run=run, key=task_key).status == "done"


def test_an_empty_answer_is_refused_with_one_clear_message_and_nothing_happens():
    question = _question()
    client = _client(_user("sam", organizations=[question.organization]))

    response = client.post(_page(question), {"_option": "guide_agent", "text": "   "})

    assert response.status_code == 200
    assert _messages(response) == ["“Guide the agent” needs text: Guidance for the agent (it reads it; never sent "
                                   "to the contact). Write it in the box, then press the button again; nothing "
                                   "was done."]
    assert Escalation.objects.get(pk=question.pk).status == EscalationStatus.OPEN
    assert not Episode.objects.filter(run=question.run, kind="human_answer").exists()


def test_a_reply_to_the_contact_is_previewed_and_sent_only_once_confirmed():
    question = _question()
    client = _client(_user("sam", organizations=[question.organization]))
    reply = "Hi Dana, no fee is needed; the W-9 is all we ask."

    preview = client.post(_page(question), {"_option": "reply_to_contact", "text": reply, "subject": "No fee"})
    shown = preview.content.decode()
    assert preview.status_code == 200 and 'id="preview"' in shown and reply in shown and h.VENDOR_EMAIL in shown
    assert _messages(preview) == ["Nothing is sent yet: check the preview, then confirm."]
    assert Escalation.objects.get(pk=question.pk).status == EscalationStatus.OPEN

    client.post(_page(question), {"_option": "reply_to_contact", "text": reply, "subject": "No fee",
                                  "confirm": "on"})
    [woken] = Episode.objects.filter(run=question.run, kind="human_answer")
    assert woken.payload["human_send"]["payload"] == {"body": reply, "subject": "No fee"}


def _approval(run: Run) -> tuple[Escalation, OutboxMessage]:
    episode = h.add_episode(run, "start")
    a.finish_episode(episode)
    draft = OutboxMessage.objects.create(
        idem_key="draft-1", run=run, episode=episode, tool="send_email", channel="email", recipient=h.VENDOR_EMAIL,
        status=OutboxStatus.AWAITING_APPROVAL, created_at=timezone.now(),
        payload={"subject": "W-9", "body": "Send the W-9 now."})
    escalation = a.open_question(run, kind="approval", prompt="Approve this email", outbox_message=draft,
                                 context={"draft": {"channel": "email", "recipient": h.VENDOR_EMAIL,
                                                    "subject": "W-9", "text": "Send the W-9 now."}})
    return escalation, draft


def test_an_edited_draft_is_previewed_then_released_with_the_edit():
    run = s.real_run()
    approval, draft = _approval(run)
    client = _client(_user("sam", organizations=[run.organization]))
    edited = "Hi Dana, could you send the W-9 when you have a moment?"

    page = client.get(_page(approval)).content.decode()
    assert 'id="draft"' in page and "Send the W-9 now." in page
    preview = client.post(_page(approval), {"_option": "edit", "text": edited})
    assert 'id="preview"' in preview.content.decode() and edited in preview.content.decode()
    assert OutboxMessage.objects.get(pk=draft.pk).status == OutboxStatus.AWAITING_APPROVAL

    client.post(_page(approval), {"_option": "edit", "text": edited, "confirm": "on"})
    released = OutboxMessage.objects.get(pk=draft.pk)
    assert released.status == OutboxStatus.PENDING and released.payload["body"].startswith(edited)


def _uncertain(run: Run) -> tuple[Escalation, OutboxMessage]:
    episode = h.add_episode(run, "start")
    a.finish_episode(episode)
    row = OutboxMessage.objects.create(
        idem_key="doubt-1", run=run, episode=episode, tool="send_sms", channel="sms", recipient="+15555550101",
        status=OutboxStatus.UNCERTAIN, created_at=timezone.now(), attempts=1, attempted_at=timezone.now(),
        payload={"body": "Hi Dana, the W-9 please."}, error="the provider could not say whether it was sent")
    escalation = a.open_question(run, kind="uncertain_send", prompt="Was it sent?", outbox_message=row, context={
        "outbox_message_id": row.pk, "provider_lookup": {"said": "the sms provider keeps no record this send "
                                                                  "can be matched to", "lookups": 1}})
    return escalation, row


def test_an_uncertain_send_shows_the_lookup_and_a_resend_needs_confirming():
    run = s.real_run()
    doubt, row = _uncertain(run)
    client = _client(_user("sam", organizations=[run.organization]))

    page = client.get(_page(doubt)).content.decode()
    assert "the sms provider keeps no record this send can be matched to" in page and "Hi Dana, the W-9" in page
    asked = client.post(_page(doubt), {"_option": "not_sent"})
    assert "Confirm and send it again" in asked.content.decode()
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.UNCERTAIN

    client.post(_page(doubt), {"_option": "not_sent", "confirm": "on"})
    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.PENDING
    assert Escalation.objects.get(pk=doubt.pk).status == EscalationStatus.RESOLVED


def test_it_was_sent_settles_at_once():
    run = s.real_run()
    doubt, row = _uncertain(run)

    _client(_user("sam", organizations=[run.organization])).post(_page(doubt), {"_option": "sent"})

    assert OutboxMessage.objects.get(pk=row.pk).status == OutboxStatus.SENT


# Bulk -----------------------------------------------------------------------------------------------------------


def test_bulk_dismiss_answers_the_fitting_ones_and_reports_one_summary():
    organization = OrganizationFactory()
    for channel in ("sms", "email"):
        escalations.raise_outage(organization.pk, channel=channel, error="down")
    outages = list(Escalation.objects.filter(organization=organization))
    question = _question(s.real_run(organization=organization))
    client = _client(_user("sam", organizations=[organization]))

    response = client.post(QUEUE, {"action": "dismiss_selected",
                                   "_selected_action": [e.pk for e in [*outages, question]]}, follow=True)

    assert {e.status for e in Escalation.objects.filter(pk__in=[e.pk for e in outages])} == {"answered"}
    assert Escalation.objects.get(pk=question.pk).status == EscalationStatus.OPEN
    assert _messages(response) == [f"“Dismiss”: 2 done, 1 skipped because the option does not fit them "
                                   f"(#{question.pk}: answer those on their own page)."]


def test_bulk_stop_cancels_each_run_and_skips_approvals():
    organization = OrganizationFactory()
    questions = [_question(s.real_run(organization=organization)) for _ in range(2)]
    approval, _ = _approval(s.real_run(organization=organization))
    client = _client(_user("sam", organizations=[organization]))

    response = client.post(QUEUE, {"action": "stop_selected_runs",
                                   "_selected_action": [e.pk for e in [*questions, approval]]}, follow=True)

    assert {Run.objects.get(pk=q.run_id).status for q in questions} == {RunStatus.CANCELLED}
    assert Escalation.objects.get(pk=approval.pk).status == EscalationStatus.OPEN
    [summary] = _messages(response)
    assert summary.startswith("“Stop the run”: 2 done, 1 skipped")


def test_bulk_claim_and_unassign():
    organization = OrganizationFactory()
    questions = [_question(s.real_run(organization=organization)) for _ in range(2)]
    user = _user("sam", organizations=[organization])
    client = _client(user)

    client.post(QUEUE, {"action": "claim_selected", "_selected_action": [q.pk for q in questions]})
    assert {e.assignee for e in Escalation.objects.filter(pk__in=[q.pk for q in questions])} == {user}
    client.post(QUEUE, {"action": "unassign_selected", "_selected_action": [q.pk for q in questions]})
    assert {e.assignee for e in Escalation.objects.filter(pk__in=[q.pk for q in questions])} == {None}


# Permissions and scope ------------------------------------------------------------------------------------------


def test_a_viewer_reads_the_queue_and_page_but_sees_no_buttons_and_cannot_act():
    question = _question()
    viewer = _client(_user("vic", perms=("view_escalation",), organizations=[question.organization]))

    page = viewer.get(_page(question))
    assert page.status_code == 200 and question.prompt in page.content.decode()
    assert 'id="answer-options"' not in page.content.decode() and 'id="claim"' not in page.content.decode()
    listing = viewer.get(QUEUE)
    assert listing.status_code == 200 and "dismiss_selected" not in listing.content.decode()

    assert viewer.post(_page(question), {"_option": "stop_run"}).status_code == 403
    assert viewer.post(_page(question), {"_claim": "1"}).status_code == 403
    viewer.post(QUEUE, {"action": "stop_selected_runs", "_selected_action": [question.pk]})
    assert Escalation.objects.get(pk=question.pk).status == EscalationStatus.OPEN
    assert Run.objects.get(pk=question.run_id).status != RunStatus.CANCELLED


def test_staff_without_escalation_permissions_are_refused():
    question = _question()
    nobody = _client(_user("nobody", perms=(), organizations=[question.organization]))

    assert nobody.get(QUEUE).status_code == 403
    assert nobody.get(_page(question)).status_code == 403
    assert nobody.post(_page(question), {"_option": "stop_run"}).status_code == 403
    assert Escalation.objects.get(pk=question.pk).status == EscalationStatus.OPEN


def test_support_sees_and_answers_only_their_organizations_escalations():
    ours, theirs = _question(), _question()
    client = _client(_user("sam", organizations=[ours.organization]))

    assert _listed(client) == [ours.pk]
    assert client.get(_page(theirs)).status_code == 302  # the admin's "does not exist" redirect, not the page
    client.post(_page(theirs), {"_option": "stop_run"})
    client.post(QUEUE, {"action": "stop_selected_runs", "_selected_action": [theirs.pk]})
    assert Escalation.objects.get(pk=theirs.pk).status == EscalationStatus.OPEN
    filters = client.get(QUEUE).content.decode()
    assert f"?organization={theirs.organization_id}" not in filters


def test_a_superuser_sees_every_organization():
    ours, theirs = _question(), _question()
    root = User.objects.create_superuser("root", "root@example.com", "pw")

    assert set(_listed(_client(root))) == {ours.pk, theirs.pk}
