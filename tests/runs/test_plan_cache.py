import json

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
    with CaptureQueriesContext(connection) as queries:
        first = leases.write(run.pk, epoch=epoch)
    assert len(queries) == 2  # the fence, and one read of the plan
    assert first.plan == Run.objects.get(pk=run.pk).plan

    with CaptureQueriesContext(connection) as queries:
        second = leases.write(run.pk, epoch=epoch)
    assert len(queries) == 1  # the fence only
    assert second.plan is first.plan


@pytest.mark.django_db
def test_the_database_hashes_a_plan_when_the_run_is_written_and_the_fence_returns_that_hash():
    run = RunFactory()
    stored = Run.objects.values_list("plan_hash", flat=True).get(pk=run.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT jsonb_hash_extended(%s::jsonb, 0)", [json.dumps(run.plan)])
        assert stored == cursor.fetchone()[0]
    fenced = leases.write(run.pk, epoch=leases.claim(run.pk, owner="w1"))
    assert fenced.plan_hash == stored
    # A plan rewritten (a data migration) is hashed again.
    Run.objects.filter(pk=run.pk).update(plan={**run.plan, "slug": "rewritten"})
    assert Run.objects.values_list("plan_hash", flat=True).get(pk=run.pk) != stored


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
def test_a_plan_rewritten_under_a_running_process_is_read_again():
    # A data migration (or a database restored under a running process): the run's row holds another plan now.
    run = RunFactory()
    epoch = leases.claim(run.pk, owner="w1")
    leases.write(run.pk, epoch=epoch)
    Run.objects.filter(pk=run.pk).update(plan={**run.plan, "slug": "another plan"})

    again = leases.write(run.pk, epoch=epoch)
    assert again.plan["slug"] == "another plan"


@pytest.mark.django_db
def test_a_full_cache_starts_over_and_still_hands_out_each_runs_own_plan(monkeypatch):
    monkeypatch.setattr(plan_cache, "LIMIT", 1)
    one = RunFactory()
    other = RunFactory(organization=one.organization, version=one.version, plan={**one.plan, "slug": "other"})
    epochs = {run.pk: leases.claim(run.pk, owner="w1") for run in (one, other)}
    for run in (one, other, one):
        assert leases.write(run.pk, epoch=epochs[run.pk]).plan == Run.objects.get(pk=run.pk).plan
    assert len(plan_cache._plans) == 1


@pytest.mark.django_db
def test_a_plan_rewritten_between_a_claim_and_its_read_is_cached_under_its_own_hash():
    one = RunFactory()
    same = RunFactory(organization=one.organization, version=one.version, plan=one.plan)
    claimed = Run.objects.defer("plan").get(pk=one.pk)  # as a claim returns the row: its plan's hash, no plan
    Run.objects.filter(pk=one.pk).update(plan={**one.plan, "slug": "rewritten"})  # before the plan is read

    assert plan_cache.attach(claimed).plan["slug"] == "rewritten"
    # The run with the original plan still gets the original, not the rewritten one cached under the old hash.
    assert leases.write(same.pk, epoch=leases.claim(same.pk, owner="w1")).plan == Run.objects.get(pk=same.pk).plan
