import threading

import pytest
from django.db import connection

from runs import episode_loads, leases
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
        raise AssertionError("a released lease fences nothing in")


@pytest.mark.django_db
@pytest.mark.parametrize("release", [True, False])
def test_a_rider_s_release_condition_releases_or_extends_the_lease(release):
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="w1")
    claimed_until = Run.objects.get(pk=run.pk).lease_expires_at
    rider = leases.Rider(release_when="%(release)s AND runs_run.lease_epoch = %(epoch)s", params={"release": release})

    written = leases.write(run.pk, epoch=epoch, rider=rider)

    assert (written.lease_owner is None, written.lease_expires_at is None) == (release, release)
    assert release or written.lease_expires_at > claimed_until  # kept: extended
    assert written.lease_epoch == epoch
    assert Run.objects.filter(pk=run.pk, lease_owner=None).exists() is release


def _epoch_handed_out_again(run: Run) -> int:
    """A claim by "lost" that a database crash took back (starts commit unflushed: runs.episode_loads), and the
    next claim, by "successor", that took the same epoch."""
    epoch = leases.claim(run.pk, owner="lost")
    Run.objects.filter(pk=run.pk).update(lease_owner="successor")
    return epoch


@pytest.mark.django_db
def test_a_worker_whose_claim_was_lost_cannot_write_under_the_epoch_handed_out_again():
    run = RunFactory()
    epoch = _epoch_handed_out_again(run)

    with pytest.raises(leases.LeaseLost):
        leases.write(run.pk, epoch=epoch, owner="lost", rider=leases.Rider(steps=1))
    with pytest.raises(leases.LeaseLost), leases.fence(run.pk, epoch=epoch, owner="lost"):
        raise AssertionError("the fence let in a worker whose claim was lost")
    assert Run.objects.get(pk=run.pk).steps_used == 0

    leases.write(run.pk, epoch=epoch, owner="successor", rider=leases.Rider(steps=1))
    assert Run.objects.get(pk=run.pk).steps_used == 1


@pytest.mark.django_db
def test_a_worker_whose_claim_was_lost_cannot_renew_hold_or_release_the_successor_s_lease():
    run = RunFactory()
    epoch = _epoch_handed_out_again(run)
    _expire(run.pk)  # renewing would bring it back to life

    assert not leases.renew(run.pk, epoch=epoch, owner="lost")
    assert not leases.holds(run.pk, epoch=epoch, owner="lost", seconds_left=0)
    leases.release(run.pk, epoch=epoch, owner="lost")
    assert episode_loads.hold_and_start(run.pk, epoch=epoch, owner="lost").run is None

    assert Run.objects.get(pk=run.pk).lease_owner == "successor"
    assert leases.renew(run.pk, epoch=epoch, owner="successor")
    leases.release(run.pk, epoch=epoch, owner="successor")
    assert Run.objects.get(pk=run.pk).lease_owner is None
