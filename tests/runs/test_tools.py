"""Tool dispatch: schema checks, recipients by role only, policy pre-checks, evidence-gated task completion."""

from datetime import UTC, datetime

import pytest

from runs import tools
from runs.llm.base import ToolCall
from runs.models import Escalation, JournalEntry, OutboxMessage, Task
from runs.outbox import idem_key
from tests.runs import loop_helpers as h

pytestmark = pytest.mark.django_db

EMAIL = {"to_role": "vendor", "subject": "Your W-9", "body": "Could you send your W-9?"}


def _dispatch(run, episode, name, arguments, *, session=None, epoch=None):
    epoch = epoch if epoch is not None else h.claim(run)
    session = session or tools.ToolSession()
    ctx = h.context(run, episode, epoch=epoch)
    return tools.dispatch(ctx, ToolCall(id="call-1", name=name, arguments=arguments), session=session), session


def test_a_tool_not_in_the_plan_is_an_error_result_and_journaled():
    run = h.make_run()  # the template lists no send_slack
    result, _ = _dispatch(run, h.add_episode(run, "start"), "send_slack", {"to_role": "vendor", "text": "hi"})

    assert result["ok"] is False and "not available" in result["error"]
    kinds = list(JournalEntry.objects.filter(run=run).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["tool_call", "tool_result"]
    assert not OutboxMessage.objects.exists()


def test_an_unknown_tool_and_bad_arguments_are_error_results():
    run = h.make_run()
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    unknown, _ = _dispatch(run, episode, "launch_missiles", {}, epoch=epoch)
    missing, _ = _dispatch(run, episode, "send_email", {"to_role": "vendor"}, epoch=epoch)
    not_object, _ = _dispatch(run, episode, "note", ["text"], epoch=epoch)

    assert unknown["ok"] is False
    assert missing["ok"] is False and "subject" in missing["error"]
    assert not_object["ok"] is False


@pytest.mark.parametrize(("name", "arguments", "words"), [
    ("send_email", {**EMAIL, "cc": "boss@vendor.test"}, "Additional properties are not allowed ('cc'"),
    ("send_email", {**EMAIL, "subject": "x" * 201}, "subject: " + repr("x" * 201) + " is too long"),
    ("send_email", {**EMAIL, "body": ""}, "body: '' should be non-empty"),
    ("send_email", {**EMAIL, "to_role": 7}, "to_role: 7 is not one of ['vendor']"),
    ("schedule_followup", {"in_s": 10, "reason": "later"}, "in_s: 10 is less than the minimum of 60"),
    ("schedule_followup", {"in_s": True, "reason": "later"}, "in_s: True is not of type 'integer'"),
])
def test_arguments_outside_the_tool_schema_are_refused_in_the_schema_words(name, arguments, words):
    run = h.make_run()
    result, _ = _dispatch(run, h.add_episode(run, "start"), name, arguments)

    assert result["ok"] is False and f"invalid arguments for {name}: {words}" in result["error"]
    assert not OutboxMessage.objects.exists()


def test_the_recipient_comes_only_from_the_run_contact_for_the_role():
    run = h.make_run()
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    stranger, _ = _dispatch(run, episode, "send_email", {**EMAIL, "to_role": "attacker"}, epoch=epoch)
    sent, _ = _dispatch(run, episode, "send_email", EMAIL, epoch=epoch)

    assert stranger["ok"] is False
    assert sent == {"ok": True, "status": "sent", "channel": "email", "to_role": "vendor",
                    "message_id": OutboxMessage.objects.get().pk}
    assert OutboxMessage.objects.get().recipient == h.VENDOR_EMAIL


def test_idem_key_counts_sends_to_the_same_recipient_within_the_episode():
    run = h.make_run()
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    session = tools.ToolSession()
    _dispatch(run, episode, "send_email", EMAIL, session=session, epoch=epoch)
    _dispatch(run, episode, "send_email", {**EMAIL, "body": "second"}, session=session, epoch=epoch)

    rows = list(OutboxMessage.objects.order_by("ordinal"))
    assert [row.ordinal for row in rows] == [0, 1]
    expected = idem_key(run_id=run.pk, episode_id=episode.pk, task_key="collect_w9", tool="send_email",
                        recipient=h.VENDOR_EMAIL, ordinal=1)
    assert rows[1].idem_key == expected


def test_a_re_executed_send_adopts_the_first_row_and_its_payload():
    run = h.make_run()
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    first, _ = _dispatch(run, episode, "send_email", EMAIL, epoch=epoch)
    again, _ = _dispatch(run, episode, "send_email", {**EMAIL, "body": "rewritten after a crash"}, epoch=epoch)

    assert again == first
    assert OutboxMessage.objects.get().payload["body"] == EMAIL["body"]


def test_sms_gets_the_required_opt_out_text():
    run = h.make_run()
    result, _ = _dispatch(run, h.add_episode(run, "start"), "send_sms", {"to_role": "vendor", "body": "W-9 please"})

    assert result["ok"] is True
    message = OutboxMessage.objects.get()
    assert message.recipient == "+15555550101"
    assert message.payload["body"].endswith("Reply STOP to opt out.")


def test_forbidden_phrase_blocks_the_send_and_asks_a_human():
    run = h.make_run()
    result, session = _dispatch(run, h.add_episode(run, "start"), "send_email",
                                {**EMAIL, "body": "Send it or face a lawsuit."})

    assert result["ok"] is False and result["status"] == "blocked"
    assert not OutboxMessage.objects.exists()
    assert JournalEntry.objects.filter(run=run, kind="policy_block", data__rule="forbidden_phrases").exists()
    assert Escalation.objects.get(run=run).kind == "guardrail_block"
    assert session.stop and session.outcome.escalated


def test_a_send_outside_the_window_is_held_not_dropped():
    night = datetime(2025, 3, 5, 4, 0, tzinfo=UTC)  # 22:00 in Chicago: quiet hours
    run = h.make_run(now=night)
    result, session = _dispatch(run, h.add_episode(run, "start"), "send_email", EMAIL)

    assert result["status"] == "held" and "will be sent then" in result["message"]
    assert session.outcome.held_until is not None and session.outcome.held_until > night
    assert session.outcome.followup_override is None
    assert JournalEntry.objects.filter(run=run, kind="policy_block", data__rule="send_window").exists()
    held = OutboxMessage.objects.get()
    assert held.status == "pending" and held.not_before == session.outcome.held_until


def test_mark_task_done_on_a_claim_is_refused_and_the_task_stays_open():
    run = h.make_run()
    episode = h.inbound(run, "I already sent it!")
    result, _ = _dispatch(run, episode, "mark_task_done", {"task_key": "collect_w9", "evidence_ref": "their word"})

    assert result["ok"] is False and result["status"] == "open"
    assert "not evidence" in result["error"]
    assert Task.objects.get(run=run).status == "open"


def test_mark_task_done_passes_on_a_received_attachment():
    run = h.make_run()
    episode = h.inbound(run, "attached", files=[h.PDF])
    result, _ = _dispatch(run, episode, "mark_task_done", {"task_key": "collect_w9", "evidence_ref": "w9-signed.pdf"})

    assert result == {"ok": True, "task_key": "collect_w9", "status": "done"}
    task = Task.objects.get(run=run)
    assert task.done_evidence["source"] == f"episode:{episode.pk}"
    assert task.done_evidence["evidence_ref"] == "w9-signed.pdf"


def test_schedule_followup_is_clamped_into_policy_bounds():
    run = h.make_run()
    result, session = _dispatch(run, h.add_episode(run, "inbound"), "schedule_followup",
                                {"at": "2025-03-15T03:00:00+00:00", "reason": "back on the 15th"})

    assert result["ok"] is True and result["moved_by_policy"] is True
    # Saturday night UTC moves to Monday's business hours in Chicago.
    assert session.outcome.followup_override.astimezone(UTC).date().isoformat() == "2025-03-17"


def test_ask_human_is_opened_once_per_episode():
    run = h.make_run()
    episode = h.inbound(run, "what is a W-9?")
    epoch = h.claim(run)
    question = {"question": "Vendor asks what a W-9 is.", "options": []}
    first, session = _dispatch(run, episode, "ask_human", question, epoch=epoch)
    again, _ = _dispatch(run, episode, "ask_human", question, epoch=epoch)

    assert first == again
    assert Escalation.objects.filter(run=run, kind="question").count() == 1
    assert session.stop and session.outcome.escalated


def test_note_and_finish():
    run = h.make_run()
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    session = tools.ToolSession()
    _dispatch(run, episode, "note", {"text": "vendor prefers mornings"}, session=session, epoch=epoch)
    finished, _ = _dispatch(run, episode, "finish", {"summary": "asked for the W-9"}, session=session, epoch=epoch)

    assert JournalEntry.objects.filter(run=run, kind="note", data__text="vendor prefers mornings").exists()
    assert session.outcome.notes == ["vendor prefers mornings"]
    assert session.outcome.finished and session.stop
    # finish does not complete the run: the required task is still open.
    assert finished["required_tasks_open"] == ["collect_w9"]
