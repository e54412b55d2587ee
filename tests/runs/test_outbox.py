"""A new send's row is written by the fence's own statement, exactly as the model holds it."""

from datetime import timedelta

import pytest
from django.db import DataError, transaction

from runs import outbox
from runs.models import OutboxMessage, OutboxStatus
from tests.runs import loop_helpers as h

pytestmark = pytest.mark.django_db


def _open(ctx, **fields) -> OutboxMessage | None:
    return outbox.open_row(ctx, **{"key": "k" * 64, "tool": "send_email", "channel": "email",
                                   "recipient": h.VENDOR_EMAIL, "task_key": "collect_w9", "ordinal": 0,
                                   "payload": {"subject": "W-9", "body": "Please.", "items": [1, 2.5, None]},
                                   **fields})


def test_a_new_row_is_written_with_every_value_as_given():
    run = h.make_run()
    episode = h.add_episode(run, "start")
    ctx = h.context(run, episode, epoch=h.claim(run))
    held_until = ctx.now + timedelta(hours=3, microseconds=7)

    opened = _open(ctx, not_before=held_until)

    stored = OutboxMessage.objects.get(pk=opened.pk)
    assert (stored.idem_key, stored.run_id, stored.episode_id, stored.escalation_id) == ("k" * 64, run.pk,
                                                                                      episode.pk, None)
    assert stored.payload == {"subject": "W-9", "body": "Please.", "items": [1, 2.5, None]}
    assert (stored.status, stored.attempts, stored.attempted_at) == (OutboxStatus.PENDING, 0, None)
    assert (stored.created_at, stored.not_before) == (ctx.now, held_until)


def test_a_value_longer_than_its_column_is_refused_not_cut():
    run = h.make_run()
    episode = h.add_episode(run, "start")
    ctx = h.context(run, episode, epoch=h.claim(run))

    with pytest.raises(DataError), transaction.atomic():
        _open(ctx, task_key="t" * 65)

    assert not OutboxMessage.objects.filter(run=run).exists()
