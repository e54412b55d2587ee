"""The lease's renewals while its holder works (runs.lease_renewals)."""

import multiprocessing
import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from runs import lease_renewals, leases
from runs.models import Run
from tests.factories import RunFactory
from tests.runs import lock_waits
from tests.runs.test_leases import _expire

Heartbeat = lease_renewals.Heartbeat


def _expires_at(run_id: int):
    return Run.objects.get(pk=run_id).lease_expires_at


def _renewed_past(run_id: int, moment, *, seconds: float = 5) -> bool:
    """Whether the lease's expiry moves past `moment` within `seconds` (polled at the heartbeats' 0.05 s pace)."""
    tick = threading.Event()
    for _ in range(int(seconds / 0.05)):
        if _expires_at(run_id) > moment:
            return True
        tick.wait(0.05)
    return _expires_at(run_id) > moment


@pytest.mark.django_db(transaction=True)
def test_heartbeat_extends_the_lease_while_it_is_held_on_a_connection_of_its_own():
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="me")
    claimed_until = _expires_at(run.pk)
    with CaptureQueriesContext(connection) as holder, Heartbeat(run.pk, epoch=epoch, interval=0.05) as beat:
        assert _renewed_past(run.pk, claimed_until)
        renewed_once = _expires_at(run.pk)
        assert _renewed_past(run.pk, renewed_once)  # and again, every interval
        assert not beat.lost.is_set()
    assert not [query for query in holder.captured_queries if query["sql"].lstrip().startswith("UPDATE")]


@pytest.mark.django_db(transaction=True)
def test_a_lease_let_go_is_renewed_no_more_while_others_are():
    let_go, held = RunFactory(), RunFactory()
    let_go_epoch, held_epoch = leases.claim(let_go.pk, owner="me"), leases.claim(held.pk, owner="me")
    with Heartbeat(let_go.pk, epoch=let_go_epoch, interval=0.05):
        assert _renewed_past(let_go.pk, _expires_at(let_go.pk))
    last_renewal = _expires_at(let_go.pk)
    with Heartbeat(held.pk, epoch=held_epoch, interval=0.05):
        assert _renewed_past(held.pk, _expires_at(held.pk))
        assert _renewed_past(held.pk, _expires_at(held.pk))  # two rounds of the heartbeat after the first let go
    assert _expires_at(let_go.pk) == last_renewal


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_that_cannot_reach_the_database_marks_the_lease_lost():
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="me")
    with Heartbeat(run.pk, epoch=epoch, interval=0.05) as beat:
        assert _renewed_past(run.pk, _expires_at(run.pk))  # the heartbeat is connected
        with connection.cursor() as cursor:  # its connection is cut, as by a restart or a partition
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        assert beat.lost.wait(timeout=5)
        with pytest.raises(leases.LeaseLost):
            beat.check()
    # The process's heartbeat goes on, on a new connection, for the next lease.
    with Heartbeat(run.pk, epoch=epoch, interval=0.05) as beat:
        assert _renewed_past(run.pk, _expires_at(run.pk))
        assert not beat.lost.is_set()


def _heartbeat_in_child(run_id: int, epoch: int, results) -> None:
    """A forked child's heartbeat: renews its own lease, and none of its parent's."""
    try:
        with Heartbeat(run_id, epoch=epoch, interval=0.05):
            results.put(_renewed_past(run_id, _expires_at(run_id)) and _renewed_past(run_id, _expires_at(run_id)))
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_renews_its_own_leases_and_none_of_its_parents():
    parents, childs = RunFactory(), RunFactory()
    parent_epoch, child_epoch = leases.claim(parents.pk, owner="parent"), leases.claim(childs.pk, owner="child")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    with Heartbeat(parents.pk, epoch=parent_epoch, interval=0.05):
        assert _renewed_past(parents.pk, _expires_at(parents.pk))  # the parent's heartbeat thread is busy
        connections.close_all()  # the child opens its own connections
        child = context.Process(target=_heartbeat_in_child, args=(childs.pk, child_epoch, results))
        child.start()
    last_renewal = _expires_at(parents.pk)  # the parent let its lease go; the child holds a copy of its heartbeat
    assert results.get(timeout=30) is True
    child.join(timeout=30)
    assert child.exitcode == 0
    assert _expires_at(parents.pk) == last_renewal


@pytest.mark.django_db(transaction=True)
def test_heartbeat_sets_lost_when_the_epoch_moves():
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="me")
    with Heartbeat(run.pk, epoch=epoch, interval=0.05) as heartbeat:
        _expire(run.pk)
        leases.claim(run.pk, owner="thief")
        assert heartbeat.lost.wait(timeout=5)
        with pytest.raises(leases.LeaseLost):
            heartbeat.check()


@pytest.mark.django_db(transaction=True)
def test_a_renewal_behind_a_writers_lock_gives_up_waiting_and_holds_up_no_other_lease(settings):
    settings.LUCIA_HEARTBEAT_SECONDS = 0.4  # a renewal waits 0.1 s for a row lock
    locked, held = RunFactory(), RunFactory()
    locked_epoch, held_epoch = leases.claim(locked.pk, owner="me"), leases.claim(held.pk, owner="me")
    with lock_waits.row_lock_held(Run, locked.pk) as release:  # a long transaction on the run's row
        locked_until = _expires_at(locked.pk)
        with Heartbeat(locked.pk, epoch=locked_epoch, interval=0.05) as stuck, \
                Heartbeat(held.pk, epoch=held_epoch, interval=0.05) as other:
            assert _renewed_past(held.pk, _expires_at(held.pk))
            assert _renewed_past(held.pk, _expires_at(held.pk))  # the locked lease's renewals hold up no other
            assert _expires_at(locked.pk) == locked_until and not stuck.lost.is_set()
            release()
            assert _renewed_past(locked.pk, locked_until)  # tried again once the row is free
            assert not stuck.lost.is_set() and not other.lost.is_set()


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_whose_claim_was_lost_marks_its_lease_lost_and_extends_nobody_s():
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="lost")
    # A database crash took the claim back and the next claim, another worker's, took the same epoch.
    Run.objects.filter(pk=run.pk).update(lease_owner="successor")
    successor_until = _expires_at(run.pk)

    with Heartbeat(run.pk, epoch=epoch, owner="lost", interval=0.05) as beat:
        assert beat.lost.wait(timeout=5)

    assert _expires_at(run.pk) == successor_until
