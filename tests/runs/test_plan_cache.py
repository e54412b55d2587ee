from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs import leases, plan_cache
from runs.models import Run
from tests.factories import RunFactory


@pytest.fixture(autouse=True)
def _empty_cache():
    plan_cache._clear()
    yield
    plan_cache._clear()


@pytest.mark.django_db
def test_a_fence_reads_a_runs_plan_once_per_process_then_takes_it_from_the_cache():
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="w1")
    assert not plan_cache.known(run.pk)
    first = leases.write(run.pk, epoch=epoch)
    assert first.plan == Run.objects.get(pk=run.pk).plan
    assert plan_cache.known(run.pk)

    with CaptureQueriesContext(connection) as queries:
        second = leases.write(run.pk, epoch=epoch)
    assert len(queries) == 1  # the fence only: no read of the plan
    assert second.plan is first.plan
    assert second.plan_hash is None  # told the plan is known, the statement did not hash it


@pytest.mark.django_db
def test_runs_of_a_version_with_the_same_plan_share_it_and_a_different_plan_is_its_own():
    one = RunFactory()
    two = RunFactory(organization=one.organization, version=one.version)
    # A draft edited between two starts: the second run copied the changed config.
    other = RunFactory(organization=one.organization, version=one.version, plan={**one.plan, "slug": "edited"})
    plans = [leases.write(run.pk, epoch=leases.claim(run.pk, owner="w1")).plan for run in (one, two, other)]
    assert plans[0] is plans[1]
    assert plans[2]["slug"] == "edited"
    assert plans[2] is not plans[0]


@pytest.mark.django_db
def test_a_run_whose_cached_plan_went_since_its_statement_began_reads_it_again(monkeypatch):
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="w1")
    leases.write(run.pk, epoch=epoch)
    # The statement is told the plan is known, and the caches are cleared before its row is read (another thread
    # filled them past their limit meanwhile).
    monkeypatch.setattr(plan_cache, "known", lambda run_id: (plan_cache._clear(), True)[1])
    again = leases.write(run.pk, epoch=epoch)
    assert again.plan == Run.objects.get(pk=run.pk).plan


@pytest.mark.django_db
def test_a_run_id_that_comes_back_as_another_run_gets_that_runs_plan():
    # A database restored or re-created under a running process: the same id, another run (its own start time).
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="w1")
    leases.write(run.pk, epoch=epoch)
    assert plan_cache.known(run.pk)
    Run.objects.filter(pk=run.pk).update(plan={**run.plan, "slug": "another run"},
                                         created_at=run.created_at - timedelta(days=1))

    again = leases.write(run.pk, epoch=epoch)
    assert again.plan["slug"] == "another run"
