"""The bench's baselines must do what they claim; its timings are never asserted."""

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.db import connection
from django_q.models import OrmQ

from agents import versions
from agents.models import Deployment
from connectors import secrets as connector_secrets
from runs import dispatch, queue
from runs.models import Contact, Episode, Run, Task
from runs.policy import window
from simulator import bench, bench_burst, bench_cpu, bench_cycle, bench_lag, bench_sql, bench_throughput, sim_org
from tests.factories import (
    ContactFactory,
    EpisodeFactory,
    OrganizationFactory,
    RunFactory,
    TaskFactory,
    deployed_agent,
    plan_version,
)
from tests.runs import send_helpers

pytestmark = pytest.mark.django_db


@pytest.fixture
def ids() -> dict:
    return {"organization_id": OrganizationFactory().pk, "version_id": plan_version().pk}


@pytest.mark.django_db(transaction=True)
def test_raw_cycle_runs_each_due_episode_once_in_two_processes():
    bench_cycle.create_schema(runs=200)

    rate, episodes, spent = bench_cycle.throughput(2, seconds=0.3)

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(DISTINCT episode_id) FROM bench_cycle_journal")
        journaled, distinct = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM bench_cycle_episodes WHERE status = 'due'")
        still_due = cursor.fetchone()[0]
        cursor.execute("DROP TABLE bench_cycle_journal, bench_cycle_episodes, bench_cycle_runs")
    assert rate > 0 and journaled > 0
    assert journaled == distinct  # no episode ran twice
    assert episodes == journaled and spent.worker > 0
    assert still_due == 20  # each closed episode scheduled the next one: 1 % of 10 per run stays due


def test_dispatch_rows_are_due_or_sleeping_as_asked(ids):
    bench_sql.insert_dispatch_runs(**ids, count=3, due=True)
    bench_sql.insert_dispatch_runs(**ids, count=50, due=False)

    with connection.cursor() as cursor:
        cursor.execute(dispatch.DUE_RUNS_SQL, {**queue.mark_params(), "skip": [], "limit": 500})
        due = cursor.fetchall()

    assert len(due) == 3
    assert Run.objects.filter(status="waiting", next_wake_at__isnull=False).count() == 50


def test_sleeping_runs_go_in_batches_each_reported_and_wake_one_second_apart(ids, monkeypatch):
    monkeypatch.setattr(bench_sql, "BATCH", 20)
    reported = []

    bench_sql.insert_dispatch_runs(**ids, count=50, due=False, progress=reported.append)

    assert reported == [20, 40, 50]
    wakes = sorted(Run.objects.values_list("next_wake_at", flat=True))
    assert len(set(wakes)) == 50 and (wakes[-1] - wakes[0]).total_seconds() >= 49
    assert Episode.objects.filter(status="queued", due_at__in=wakes).count() == 50


def test_table_shows_ratios_and_misses():
    figures = [bench.Figure("a", "1 s", "2 s target", 0.5, "< 1.00", True),
               bench.Figure("b", "4 ep/s", "80 ep/s raw", 0.05, ">= 0.33", False)]

    lines = bench.table(figures)

    assert lines[0].split()[:2] == ["figure", "measured"]
    assert lines[2].split()[-2:] == ["1.00", "ok"]
    assert "0.05" in lines[3] and lines[3].endswith("MISS")


def test_the_command_counts_only_missed_targets_not_figures_that_are_only_reported(monkeypatch):
    figures = [bench.Figure("burst", "50 ep/s", "all done", None, "all drained", True),
               bench.Figure("burst due-lag", "p95 180 s", "-", None, "reported", None),
               bench.Figure("sims", "0.3 s", "0.1 s target", 3.0, "<= 1.00", False)]
    monkeypatch.setattr(bench, "run", lambda **kwargs: figures)
    out = StringIO()

    call_command("bench", "--only", "burst", "sims", stdout=out, stderr=StringIO())

    assert out.getvalue().rstrip().endswith("1 figure(s) missed their target")


def test_the_due_lag_drain_runs_each_queued_advance_task_like_a_worker(monkeypatch):
    ran = []
    monkeypatch.setattr("runs.worker.advance_run", lambda run_id: ran.append(run_id))
    runs = [RunFactory() for _ in range(3)]
    for run in runs:
        EpisodeFactory(run=run)
        queue.enqueue_advance(run)

    assert bench_lag.drain_queue() == 3
    assert ran == [run.pk for run in runs]
    assert not OrmQ.objects.exists()


def test_burst_copies_a_sleeping_run_with_contacts_of_their_own_and_makes_them_due(ids):
    template = RunFactory(status="waiting")
    ContactFactory(run=template, email="vendor@example.com", phone="+15550001111")
    TaskFactory(run=template)
    EpisodeFactory(run=template, kind="followup", status="queued")
    EpisodeFactory(run=template, kind="start", status="done", seq=0, dedupe_key="start")

    copies = bench_burst.clone_runs(template.pk, count=3)
    due_at = bench_burst.make_due(copies)

    assert len(set(copies)) == 3 and template.pk not in copies
    emails = set(Contact.objects.filter(run_id__in=copies).values_list("email", flat=True))
    assert len(emails) == 3 and "vendor@example.com" not in emails
    assert Task.objects.filter(run_id__in=copies).count() == 3
    queued = Episode.objects.filter(run_id__in=copies)
    assert [e.kind for e in queued] == ["followup"] * 3 and all(e.due_at == due_at for e in queued)


def test_history_copies_a_real_start_as_finished_runs_each_with_rows_of_its_own(settings):
    settings.LUCIA_LLM = "scripted"
    organization, deployment = deployed_agent(send_helpers.open_plan(), organization=OrganizationFactory(sandbox=True))
    sim_org.ensure_identities(organization)
    contact = {"role": "vendor", "name": "Bench Vendor", "email": "vendor@bench.example", "phone": "+15550000001"}

    sent = bench_throughput.seed_history(deployment.version, organization, contact=contact, inputs={}, runs=3)

    template = Run.objects.filter(organization=organization).earliest("pk")
    copies = Run.objects.filter(organization=organization).exclude(pk=template.pk)
    assert copies.count() == 3 and sent == 3 * template.outbox.filter(status="sent").count() > 0
    for copy in copies:  # finished: nothing wakes, dispatches or claims it
        assert (copy.status, copy.next_wake_at, copy.wake_when, copy.lease_owner) == ("completed", None, None, None)
        assert copy.ended_at is not None
        (episode,) = copy.episodes.all()
        assert (episode.kind, episode.status) == ("start", "done")
        assert sorted(copy.journal.values_list("seq", "kind")) == sorted(template.journal.values_list("seq", "kind"))
        assert set(copy.journal.values_list("episode_id", flat=True)) == {episode.pk}
        (contact,) = copy.contacts.all()
        assert (contact.email, contact.slack_user) == (f"history{copy.pk}@bench.example", f"UHISTORY{copy.pk}")
        assert {(row.episode_id, row.recipient, row.status) for row in copy.outbox.all()} == {
            (episode.pk, contact.email, "sent")}
    assert len({contact.phone for contact in Contact.objects.filter(run__organization=organization)}) == 4


def test_a_working_zone_is_the_middle_of_the_day_there_at_every_quarter_hour_of_the_year():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for quarter in range(365 * 24 * 4):  # every quarter hour: Kolkata's offset puts its hours at half past
        now = start + timedelta(minutes=15 * quarter)
        assert 10 <= now.astimezone(ZoneInfo(bench_burst.working_zone(now))).hour < 16, now


def test_the_real_runs_agent_is_the_published_template_with_every_day_a_business_day(settings):
    settings.LUCIA_LLM = "scripted"
    organization = OrganizationFactory(sandbox=True)
    template = next(version for version in bench.load_templates(organization)
                    if version.agent.slug == "document-collector")
    template = versions.publish(template)

    copy = bench._every_day(template, organization)

    assert copy.status == "published" and copy.agent.slug == "document-collector-every-day"
    assert copy.compiled["followup"]["business_days"] == list(range(7))
    unchanged = {key: value for key, value in template.compiled["followup"].items() if key != "business_days"}
    assert {key: copy.compiled["followup"][key] for key in unchanged} == unchanged
    assert copy.compiled["tasks"] == template.compiled["tasks"]
    assert Deployment.objects.get(organization=organization, active=True).version == copy
    saturday = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    assert window.check_send_window(copy.compiled, contact_tz=bench_burst.working_zone(saturday),
                                    org_tz="UTC", now=saturday, run_id=1) is None


def test_the_cpu_figure_adds_the_backend_to_the_worker_when_both_sides_have_it():
    both = bench._cpu_figure(1, runtime=bench_cpu.Spent(worker=0.003, backend=0.002),
                             raw=bench_cpu.Spent(worker=0.0005, backend=0.0005))
    remote = bench._cpu_figure(1, runtime=bench_cpu.Spent(worker=0.003, backend=None),
                               raw=bench_cpu.Spent(worker=0.0006, backend=None))

    assert both.measured == "5.00 ms (3.00 worker + 2.00 PostgreSQL)" and both.ratio == pytest.approx(0.2)
    assert remote.measured.startswith("3.00 ms (worker;") and remote.ratio == pytest.approx(0.2)
    assert both.ok is None and remote.ok is None  # reported, never a target


@pytest.mark.django_db(transaction=True)
def test_throughput_times_only_its_runs_after_each_process_warmed_up_on_runs_of_its_own(monkeypatch, settings):
    """One process, three rounds: every run it made ran its start episode once, the warm-ups untimed."""
    settings.LUCIA_LLM = "scripted"
    monkeypatch.setattr(bench_throughput, "RAW_WINDOW_S", 0.05)
    monkeypatch.setattr(bench_throughput, "WARMUP_EPISODES", 2)
    organization, deployment = deployed_agent(organization=OrganizationFactory(sandbox=True))
    sim_org.ensure_identities(organization)
    contact = {"role": "vendor", "name": "Bench Vendor", "email": "vendor@bench.example", "phone": "+15550000001"}

    measured = bench_throughput.measure(deployment.version, organization, processes=1, runs=3, contact=contact,
                                        inputs={})

    runs = Run.objects.filter(organization=organization)
    assert runs.count() == 3 + 2 * 3 + 1  # timed, warm-ups of each round, one untimed in the parent
    assert Episode.objects.filter(run__in=runs, kind="start", status="done").count() == runs.count()
    assert measured.episodes == 3 and measured.runtime_rate > 0 and measured.raw_rate > 0
    assert measured.runtime_cpu.worker > 0
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_cycle_journal, bench_cycle_episodes, bench_cycle_runs")


CHILD = """
import django; django.setup()
from django.conf import settings
from connectors import secrets
print(settings.DEBUG, secrets.decrypt({token!r}))
"""


def test_the_burst_s_workers_run_without_debug_and_read_the_secrets_stored_before(settings, monkeypatch):
    # `make bench` runs with DJANGO_DEBUG=true and the development key: the workers it starts run as production
    # (DEBUG off, which refuses that key) and still decrypt what the bench's organization stored.
    monkeypatch.setenv("DJANGO_DEBUG", "true")
    for name in ("DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE", "LUCIA_SECRETS_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings.DEBUG, settings.SECRET_KEY, settings.LUCIA_SECRETS_KEY = True, settings.INSECURE_SECRET_KEY, ""
    token = connector_secrets.encrypt({"api_key": "kept"})

    env = bench_burst.worker_environment("postgresql://bench@localhost:5432/lucia_bench")
    child = subprocess.run([sys.executable, "-c", CHILD.format(token=token)], env=env, cwd=settings.BASE_DIR,  # noqa: S603 (this interpreter, our code)
                           capture_output=True, text=True, check=True)

    assert env["DATABASE_URL"] == "postgresql://bench@localhost:5432/lucia_bench" and env["LUCIA_Q_WORKERS"] == "2"
    assert child.stdout.split("\n")[-2] == "False {'api_key': 'kept'}"
