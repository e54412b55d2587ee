import multiprocessing
import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from runs import leases
from runs.models import Run
from tests.factories import RunFactory


def _expire(run_id: int) -> None:
    """Make the current lease look expired, on the database clock the leases use."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [run_id])


def _in_thread(target, *args):
    """Run `target` on its own database connection; returns a list that receives its result."""
    result = []

    def body():
        try:
            result.append(target(*args))
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread, result


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_for_a_claim_get_exactly_one_epoch():
    run = RunFactory()
    barrier = threading.Barrier(8)

    def claim(owner):
        barrier.wait(timeout=5)
        return leases.claim(run.pk, owner=owner)

    workers = [_in_thread(claim, f"worker-{n}") for n in range(8)]
    for thread, _ in workers:
        thread.join(timeout=10)
    epochs = [result[0] for _, result in workers]
    assert len(epochs) == 8
    assert [e for e in epochs if e is not None] == [1]
    assert Run.objects.get(pk=run.pk).lease_epoch == 1


@pytest.mark.django_db
def test_claim_is_refused_while_the_lease_is_live_and_granted_after_it_expires():
    run = RunFactory()
    assert leases.claim(run.pk, owner="a") == 1
    assert leases.claim(run.pk, owner="b") is None
    _expire(run.pk)
    assert leases.claim(run.pk, owner="b") == 2
    assert Run.objects.get(pk=run.pk).lease_owner == "b"


@pytest.mark.django_db
def test_zombie_worker_writes_nothing_after_lease_lost():
    run = RunFactory(goal="original")
    zombie = leases.claim(run.pk, owner="zombie")
    _expire(run.pk)  # the zombie paused past its lease...
    assert leases.claim(run.pk, owner="successor") == zombie + 1  # ...and someone else took the run

    with pytest.raises(leases.LeaseLost), leases.fence(run.pk, epoch=zombie):
        Run.objects.filter(pk=run.pk).update(goal="written by a zombie")
    assert not leases.renew(run.pk, epoch=zombie)
    assert Run.objects.get(pk=run.pk).goal == "original"


@pytest.mark.django_db
def test_release_by_a_stale_epoch_leaves_the_new_holders_lease():
    run = RunFactory()
    old = leases.claim(run.pk, owner="old")
    _expire(run.pk)
    new = leases.claim(run.pk, owner="new")
    leases.release(run.pk, epoch=old)
    assert Run.objects.get(pk=run.pk).lease_owner == "new"
    leases.release(run.pk, epoch=new)
    assert Run.objects.get(pk=run.pk).lease_owner is None
    with pytest.raises(leases.LeaseLost), leases.fence(run.pk, epoch=new):
        pass  # a released lease fences nothing in


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
    with CaptureQueriesContext(connection) as holder, leases.Heartbeat(run.pk, epoch=epoch, interval=0.05) as beat:
        assert _renewed_past(run.pk, claimed_until)
        renewed_once = _expires_at(run.pk)
        assert _renewed_past(run.pk, renewed_once)  # and again, every interval
        assert not beat.lost.is_set()
    assert not [query for query in holder.captured_queries if query["sql"].lstrip().startswith("UPDATE")]


@pytest.mark.django_db(transaction=True)
def test_a_lease_let_go_is_renewed_no_more_while_others_are():
    let_go, held = RunFactory(), RunFactory()
    let_go_epoch, held_epoch = leases.claim(let_go.pk, owner="me"), leases.claim(held.pk, owner="me")
    with leases.Heartbeat(let_go.pk, epoch=let_go_epoch, interval=0.05):
        assert _renewed_past(let_go.pk, _expires_at(let_go.pk))
    last_renewal = _expires_at(let_go.pk)
    with leases.Heartbeat(held.pk, epoch=held_epoch, interval=0.05):
        assert _renewed_past(held.pk, _expires_at(held.pk))
        assert _renewed_past(held.pk, _expires_at(held.pk))  # two rounds of the heartbeat after the first let go
    assert _expires_at(let_go.pk) == last_renewal


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_that_cannot_reach_the_database_marks_the_lease_lost():
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="me")
    with leases.Heartbeat(run.pk, epoch=epoch, interval=0.05) as beat:
        assert _renewed_past(run.pk, _expires_at(run.pk))  # the heartbeat is connected
        with connection.cursor() as cursor:  # its connection is cut, as by a restart or a partition
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        assert beat.lost.wait(timeout=5)
        with pytest.raises(leases.LeaseLost):
            beat.check()
    # The process's heartbeat goes on, on a new connection, for the next lease.
    with leases.Heartbeat(run.pk, epoch=epoch, interval=0.05) as beat:
        assert _renewed_past(run.pk, _expires_at(run.pk))
        assert not beat.lost.is_set()


def _heartbeat_in_child(run_id: int, epoch: int, results) -> None:
    """A forked child's heartbeat: renews its own lease, and none of its parent's."""
    try:
        with leases.Heartbeat(run_id, epoch=epoch, interval=0.05):
            results.put(_renewed_past(run_id, _expires_at(run_id)) and _renewed_past(run_id, _expires_at(run_id)))
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_forked_child_renews_its_own_leases_and_none_of_its_parents():
    parents, childs = RunFactory(), RunFactory()
    parent_epoch, child_epoch = leases.claim(parents.pk, owner="parent"), leases.claim(childs.pk, owner="child")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    with leases.Heartbeat(parents.pk, epoch=parent_epoch, interval=0.05):
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
    with leases.Heartbeat(run.pk, epoch=epoch, interval=0.05) as heartbeat:
        _expire(run.pk)
        leases.claim(run.pk, owner="thief")
        assert heartbeat.lost.wait(timeout=5)
        with pytest.raises(leases.LeaseLost):
            heartbeat.check()
