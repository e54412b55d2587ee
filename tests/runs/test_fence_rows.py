"""What a fence returns (runs.leases.write): the run row as its statement left it."""

import pytest
from django.db import connection

from runs import leases
from runs.models import Run
from tests.factories import RunFactory


def _set(run_id: int, **values) -> None:
    """Change the row behind the fence's back (as another writer would, or as a start wrote it)."""
    Run.objects.filter(pk=run_id).update(**values)


@pytest.mark.django_db
def test_a_fence_with_an_earlier_row_reads_what_changes_and_keeps_what_a_start_fixed():
    run = RunFactory(goal="chase the invoice", inputs={"invoice": "A-1"})
    epoch = leases.claim(run.pk, owner="w1")
    known = leases.write(run.pk, epoch=epoch)
    _set(run.pk, status="waiting", wake_when="reply:email", state={"v": 1, "seen": True})

    fenced = leases.write(run.pk, epoch=epoch, known=known)

    assert (fenced.status, fenced.wake_when, fenced.state) == ("waiting", "reply:email", {"v": 1, "seen": True})
    assert fenced.lease_expires_at >= known.lease_expires_at
    assert (fenced.goal, fenced.inputs, fenced.organization_id, fenced.version_id, fenced.created_at) == (
        "chase the invoice", {"invoice": "A-1"}, run.organization_id, run.version_id, known.created_at)
    assert fenced.get_deferred_fields() == set()
    # Saving it writes what it holds, as for a row the ORM read.
    fenced.save(update_fields=["wake_when"])
    assert Run.objects.get(pk=run.pk).goal == "chase the invoice"


@pytest.mark.django_db
def test_a_fence_refuses_a_row_of_another_run():
    run, other = RunFactory(), RunFactory()
    epoch = leases.claim(run.pk, owner="w1")
    with pytest.raises(ValueError):
        leases.write(run.pk, epoch=epoch, known=other)


@pytest.mark.django_db
def test_a_fence_with_an_earlier_row_still_writes_nothing_after_the_lease_moved():
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="w1")
    known = leases.write(run.pk, epoch=epoch)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE runs_run SET lease_epoch = lease_epoch + 1 WHERE id = %s", [run.pk])
    with pytest.raises(leases.LeaseLost):
        leases.write(run.pk, epoch=epoch, known=known)
