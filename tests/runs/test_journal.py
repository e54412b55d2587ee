"""The journal: fenced appends with per-run seq, usage charged in the same transaction, replay lookup."""

import threading
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection

from runs import journal, leases
from runs.models import JournalEntry, JournalKind, Run
from tests.factories import EpisodeFactory, RunFactory

AT = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)


def _claimed_run() -> tuple[Run, int]:
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="test-worker")
    assert epoch is not None
    return run, epoch


def _usage(run: Run) -> tuple:
    # Read as values: refresh_from_db would assign the protected FSM status field.
    return Run.objects.filter(pk=run.pk).values_list("tokens_used", "cost_used", "steps_used").get()


@pytest.mark.django_db
def test_seq_counts_up_per_run_and_entries_come_back_in_order():
    run, epoch = _claimed_run()
    other, other_epoch = _claimed_run()
    episode = EpisodeFactory(run=run)
    for kind in (JournalKind.MODEL_CALL, JournalKind.TOOL_CALL, JournalKind.TOOL_RESULT):
        journal.append(run.pk, epoch=epoch, episode_id=episode.pk, kind=kind, data={"k": kind}, at=AT)
    journal.append(other.pk, epoch=other_epoch, episode_id=None, kind=JournalKind.NOTE, data={}, at=AT)

    entries = list(journal.entries_for(run.pk))
    assert [e.seq for e in entries] == [1, 2, 3]
    assert [e.kind for e in entries] == ["model_call", "tool_call", "tool_result"]
    assert [e.seq for e in journal.entries_for(other.pk)] == [1]


@pytest.mark.django_db
def test_usage_is_charged_to_the_run_with_the_entry():
    run, epoch = _claimed_run()
    entry = journal.append(
        run.pk, epoch=epoch, episode_id=None, kind=JournalKind.MODEL_CALL, data={}, at=AT, request_hash="h" * 64,
        model_name="gpt-4o-mini", model_provider="openai", tokens_in=1000, tokens_out=200, cost=Decimal("0.00027"),
        steps=1,
    )
    assert _usage(run) == (1200, Decimal("0.0003"), 1)
    entry.refresh_from_db()
    assert (entry.model_provider, entry.model_name, entry.cost) == ("openai", "gpt-4o-mini", Decimal("0.000270"))


@pytest.mark.django_db
def test_zombie_worker_appends_nothing_after_its_epoch_moved():
    run, epoch = _claimed_run()
    leases.release(run.pk, epoch=epoch)
    assert leases.claim(run.pk, owner="another-worker") == epoch + 1

    with pytest.raises(leases.LeaseLost):
        journal.append(run.pk, epoch=epoch, episode_id=None, kind=JournalKind.MODEL_CALL, data={}, at=AT,
                       tokens_in=50, tokens_out=5, cost=Decimal("1"), steps=1)

    assert not JournalEntry.objects.filter(run=run).exists()
    assert _usage(run) == (0, Decimal("0"), 0)


@pytest.mark.django_db
def test_unknown_kind_is_refused():
    run, epoch = _claimed_run()
    with pytest.raises(ValueError, match="unknown journal kind"):
        journal.append(run.pk, epoch=epoch, episode_id=None, kind="thought", data={}, at=AT)


@pytest.mark.django_db
def test_find_replay_returns_the_nth_model_call_with_that_hash_in_that_episode():
    run, epoch = _claimed_run()
    episode, later = EpisodeFactory(run=run), EpisodeFactory(run=run)
    same = "a" * 64
    first = journal.append(run.pk, epoch=epoch, episode_id=episode.pk, kind=JournalKind.MODEL_CALL,
                           data={"n": 1}, at=AT, request_hash=same)
    journal.append(run.pk, epoch=epoch, episode_id=episode.pk, kind=JournalKind.NOTE, data={}, at=AT,
                   request_hash=same)
    second = journal.append(run.pk, epoch=epoch, episode_id=episode.pk, kind=JournalKind.MODEL_CALL,
                            data={"n": 2}, at=AT, request_hash=same)

    assert journal.find_replay(episode.pk, same, occurrence=1) == first
    assert journal.find_replay(episode.pk, same, occurrence=2) == second
    assert journal.find_replay(episode.pk, same, occurrence=3) is None
    assert journal.find_replay(later.pk, same, occurrence=1) is None
    assert journal.find_replay(episode.pk, "b" * 64, occurrence=1) is None
    with pytest.raises(ValueError):
        journal.find_replay(episode.pk, same, occurrence=0)


@pytest.mark.django_db(transaction=True)
def test_concurrent_appends_under_one_lease_get_distinct_seqs():
    run, epoch = _claimed_run()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for index in range(10):
                journal.append(run.pk, epoch=epoch, episode_id=None, kind=JournalKind.NOTE,
                               data={"writer": name, "i": index}, at=AT, tokens_in=1, steps=1)
        except BaseException as error:  # surfaced below: a thread's failure must fail the test
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert sorted(journal.entries_for(run.pk).values_list("seq", flat=True)) == list(range(1, 31))
    assert _usage(run)[::2] == (30, 30)
