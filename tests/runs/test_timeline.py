"""The timeline groups a run's story by episode and shows tool calls as readable lines, never as reprs."""

from datetime import timedelta

import pytest

from runs import clock, journal, leases
from runs.models import EpisodeStatus, JournalKind
from runs.timeline import by_episode, readable, timeline_for
from tests.factories import EpisodeFactory, RunFactory
from tests.studio_users import staff_user

pytestmark = pytest.mark.django_db

BODY = "Hello Vera,\n\ncould you send your W-9 by Friday? " + "Thanks! " * 30


def _story():
    run = RunFactory()
    now = clock.wall_now()
    start = EpisodeFactory(run=run, kind="start", status=EpisodeStatus.DONE, due_at=now - timedelta(hours=2))
    reply = EpisodeFactory(run=run, kind="inbound", status=EpisodeStatus.DONE, due_at=now - timedelta(hours=1),
                           payload={"channel": "email", "text": "Attached.", "from": "vera@example.com"})
    epoch = leases.claim(run.pk, owner="test")
    at = now - timedelta(minutes=110)
    journal.append(run.pk, epoch=epoch, episode_id=start.pk, kind=JournalKind.TOOL_CALL, at=at, data={
        "call_id": "c1", "name": "send_email",
        "arguments": {"to": "vera@example.com", "subject": "Your W-9", "body": BODY}})
    journal.append(run.pk, epoch=epoch, episode_id=start.pk, kind=JournalKind.TOOL_RESULT, at=at, data={
        "call_id": "c1", "name": "send_email", "result": {"status": "sent", "outbox_id": 7}})
    journal.append(run.pk, epoch=epoch, episode_id=None, kind=JournalKind.NOTE, at=now - timedelta(minutes=90),
                   data={"text": "a human answered", "by": {"user_id": 1}})
    journal.append(run.pk, epoch=epoch, episode_id=reply.pk, kind=JournalKind.NOTE,
                   at=now - timedelta(minutes=55), data={"text": "W-9 received"})
    leases.release(run.pk, epoch=epoch)
    return run, start, reply


def test_a_tool_call_reads_as_its_name_and_arguments_with_the_full_text_in_detail():
    run, start, _ = _story()

    call = next(item for item in timeline_for(run) if item.kind == JournalKind.TOOL_CALL)

    # Arguments come back in jsonb's key order; each reads as "name: value".
    assert call.summary.startswith("send_email: to: vera@example.com; ")
    assert "body: Hello Vera, could you send" in call.summary
    assert len(call.summary) <= 140 and "{" not in call.summary and "'" not in call.summary
    lines = call.detail.splitlines()
    assert {"to: vera@example.com", "subject: Your W-9", "body: Hello Vera,"} <= set(lines)
    assert BODY.splitlines()[-1] in lines and call.episode == start.pk


def test_items_are_grouped_under_their_episode_in_order():
    run, start, reply = _story()

    groups = by_episode(timeline_for(run))

    assert [group.episode.ref if group.episode else None for group in groups] == [start.pk, None, reply.pk]
    assert [item.kind for item in groups[0].items] == ["tool_call", "tool_result"]
    assert groups[0].items[1].summary == "send_email: status: sent; outbox_id: 7"
    assert [item.summary for item in groups[1].items] == ["a human answered"]
    assert "text: Attached." in groups[2].episode.detail


def test_readable_nests_lists_and_dicts_without_python_reprs():
    text = readable({"to": ["a@example.com", "b@example.com"], "flags": {"urgent": True, "retries": None}})
    assert text == "to:\n  - a@example.com\n  - b@example.com\nflags:\n  urgent: yes\n  retries: —"


def test_the_studio_timeline_shows_episodes_with_expandable_lines(client):
    run, start, _ = _story()
    client.force_login(staff_user("root", superuser=True))

    page = client.get(f"/admin/runs/run/{run.pk}/timeline/").content.decode()

    assert f'data-episode="{start.pk}"' in page and 'data-episode="none"' in page
    assert '<details class="lucia-item"><summary>send_email: to: vera@example.com;' in page
    assert "{&#x27;" not in page and "Thanks! Thanks!" in page
