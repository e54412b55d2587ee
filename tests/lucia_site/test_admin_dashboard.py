"""The Studio's landing page: what needs attention, counted, each count a link to the list behind it."""

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from runs import clock
from runs.models import EpisodeStatus, Escalation, Run, RunStatus
from tests.factories import EpisodeFactory, EscalationFactory, OrganizationFactory, RunFactory
from tests.studio_users import staff_user

pytestmark = pytest.mark.django_db

VIEW = ("runs.view_run", "runs.view_escalation")


def _ago(**delta) -> object:
    return clock.wall_now() - timedelta(**delta)


def _escalation(run: Run, *, kind: str = "question", age: timedelta) -> Escalation:
    escalation = EscalationFactory(run=run, kind=kind)
    Escalation.objects.filter(pk=escalation.pk).update(created_at=clock.wall_now() - age)
    return escalation


def _overdue(organization, *, minutes: int, sim: bool = False) -> Run:
    run = RunFactory(organization=organization, sim=sim)
    EpisodeFactory(run=run, due_at=_ago(minutes=minutes))
    return run


def _expired_lease(organization) -> Run:
    run = RunFactory(organization=organization)
    Run.objects.filter(pk=run.pk).update(lease_owner="worker-1", lease_epoch=1, lease_expires_at=_ago(minutes=3))
    return run


def _long_episode(organization) -> Run:
    run = RunFactory(organization=organization)
    Run.objects.filter(pk=run.pk).update(lease_owner="worker-2", lease_epoch=1,
                                         lease_expires_at=clock.wall_now() + timedelta(seconds=60))
    EpisodeFactory(run=run, status=EpisodeStatus.RUNNING, attempts=1, due_at=_ago(hours=1), started_at=_ago(minutes=30))
    return run


def _failed(organization) -> Run:
    run = RunFactory(organization=organization, status=RunStatus.WAITING_HUMAN)
    EpisodeFactory(run=run, status=EpisodeStatus.FAILED, attempts=3, finished_at=_ago(minutes=5), error="boom")
    return run


@pytest.fixture
def acme():
    return OrganizationFactory(name="Acme", slug="acme")


@pytest.fixture
def attention_states(acme):
    """Every state the dashboard counts, in Acme, plus things it must not count."""
    runs = {
        "overdue": [_overdue(acme, minutes=10), _overdue(acme, minutes=30)],
        "stuck": [_expired_lease(acme), _long_episode(acme)],
        "failed": [_failed(acme)],
    }
    # Not overdue: due a moment ago (within the grace), due later, or ended.
    _overdue(acme, minutes=0)
    later = RunFactory(organization=acme)
    EpisodeFactory(run=later, due_at=clock.wall_now() + timedelta(days=2))
    ended = _overdue(acme, minutes=60)
    Run.objects.filter(pk=ended.pk).update(status=RunStatus.COMPLETED)
    # A failure already retried (a later episode queued) is recovered.
    recovered = _failed(acme)
    EpisodeFactory(run=recovered, due_at=clock.wall_now() + timedelta(hours=1))
    # Escalations: two questions (one past the default 4h SLA), one uncertain send, one answered.
    question_run = RunFactory(organization=acme, status=RunStatus.WAITING_HUMAN)
    runs["escalations"] = [_escalation(question_run, age=timedelta(hours=5)),
                           _escalation(question_run, age=timedelta(hours=1)),
                           _escalation(question_run, kind="uncertain_send", age=timedelta(minutes=10))]
    answered = _escalation(question_run, age=timedelta(hours=9))
    Escalation.objects.filter(pk=answered.pk).update(status="answered")
    return runs


def _card(page: str, name: str) -> tuple[str, str]:
    """(the count shown, the link) of the dashboard card `name`."""
    import re

    match = re.search(rf'id="count-{name}" href="([^"]+)">\s*<span class="lucia-count" data-count="{name}">([^<]+)<',
                      page)
    assert match, f"no {name} card"
    return match.group(2), match.group(1).replace("&amp;", "&")


def test_the_landing_page_counts_what_needs_attention_and_links_each_count(client, attention_states):
    client.force_login(staff_user("root", superuser=True))

    response = client.get("/admin/")

    assert response.status_code == 200
    page = response.content.decode()
    assert _card(page, "overdue") == ("2", "/admin/runs/run/?attention=overdue&work=live")
    assert _card(page, "stuck") == ("2", "/admin/runs/run/?attention=stuck&work=live")
    assert _card(page, "failed") == ("1", "/admin/runs/run/?attention=failed&work=live")
    assert _card(page, "escalations") == ("3", "/admin/runs/escalation/?status=open")
    assert "1 past SLA" in page
    assert client.get(_card(page, "escalations")[1]).context["cl"].result_count == 3
    for name, expected in [("overdue", attention_states["overdue"]), ("stuck", attention_states["stuck"]),
                           ("failed", attention_states["failed"])]:
        listed = client.get(_card(page, name)[1]).context["cl"].result_list
        assert {run.pk for run in listed} == {run.pk for run in expected}, name


def test_escalations_are_listed_oldest_first_by_kind_with_sla_breaches_marked(client, attention_states):
    client.force_login(staff_user("root", superuser=True))

    context = client.get("/admin/").context
    oldest, newer, uncertain = attention_states["escalations"]

    assert [item.escalation.pk for item in context["oldest_escalations"]] == [oldest.pk, newer.pk, uncertain.pk]
    assert [item.breached for item in context["oldest_escalations"]] == [True, False, False]
    kinds = {row["summary"].kind: row for row in context["escalation_kinds"]}
    assert (kinds["question"]["summary"].count, kinds["question"]["summary"].breached) == (2, 1)
    assert kinds["question"]["url"] == "/admin/runs/escalation/?status=open&kind=question"
    listed = client.get(kinds["question"]["url"]).context["cl"].result_list
    assert {escalation.pk for escalation in listed} == {oldest.pk, newer.pk}


def test_an_agents_escalation_sla_decides_the_breach(client, acme):
    plan = RunFactory(organization=acme).plan
    plan["followup"]["escalation_sla_s"] = 1800
    _escalation(RunFactory(organization=acme, plan=plan), age=timedelta(hours=1))
    client.force_login(staff_user("root", superuser=True))

    [item] = client.get("/admin/").context["oldest_escalations"]

    assert item.breached and item.sla == timedelta(minutes=30)


def test_overdue_runs_show_their_due_lag(client, acme):
    run = _overdue(acme, minutes=45)
    client.force_login(staff_user("root", superuser=True))

    [row] = client.get("/admin/").context["overdue_runs"]

    assert row["run"].pk == run.pk
    assert timedelta(minutes=44) < row["lag"] < timedelta(minutes=47)


def test_simulated_work_is_left_out_until_asked_for(client, acme):
    _overdue(acme, minutes=10)
    _overdue(acme, minutes=10, sim=True)
    _overdue(OrganizationFactory(slug="acme-sim"), minutes=10)
    client.force_login(staff_user("root", superuser=True))

    live = client.get("/admin/").content.decode()
    everything = client.get("/admin/?sim=1").content.decode()

    assert _card(live, "overdue")[0] == "1"
    assert _card(everything, "overdue") == ("3", "/admin/runs/run/?attention=overdue")
    assert client.get(_card(everything, "overdue")[1]).context["cl"].result_count == 3
    assert 'href="?sim=1"' in live and "Include simulated work" in live


def test_worker_health_is_the_healthz_report(client, acme):
    _overdue(acme, minutes=30)  # due-lag past /healthz/'s limit
    client.force_login(staff_user("root", superuser=True))

    context = client.get("/admin/").context
    healthz = client.get("/healthz/").json()

    assert context["health"].healthy is False and healthz["status"] == "error"
    assert context["health"].problems[0].split(":")[0] == healthz["problems"][0].split(":")[0] == "due-lag"
    assert _card(client.get("/admin/").content.decode(), "health")[1] == "/healthz/"


def test_staff_count_only_their_organizations(client, acme):
    globex = OrganizationFactory(name="Globex", slug="globex")
    mine = _overdue(acme, minutes=10)
    _overdue(globex, minutes=10)
    _escalation(RunFactory(organization=globex), age=timedelta(hours=6))
    client.force_login(staff_user("ann", perms=VIEW, organizations=[acme]))

    context = client.get("/admin/").context

    assert context["overdue_count"] == 1 and [row["run"].pk for row in context["overdue_runs"]] == [mine.pk]
    assert context["escalations_open"] == 0


def test_a_user_without_view_permissions_sees_no_counts(client, acme):
    _overdue(acme, minutes=10)
    client.force_login(staff_user("nobody", organizations=[acme]))

    response = client.get("/admin/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "no permission to view runs or escalations" in page and 'id="count-overdue"' not in page


def test_escalation_viewers_see_escalations_only(client, acme):
    _overdue(acme, minutes=10)
    _escalation(RunFactory(organization=acme), age=timedelta(hours=1))
    client.force_login(staff_user("sue", perms=("runs.view_escalation",), organizations=[acme]))

    page = client.get("/admin/").content.decode()

    assert _card(page, "escalations")[0] == "1"
    assert 'id="count-overdue"' not in page and 'id="panel-health"' not in page


def test_the_dashboard_refreshes_its_panels_and_keeps_the_app_list(client, attention_states):
    client.force_login(staff_user("root", superuser=True))

    page = client.get("/admin/").content.decode()
    partial = client.get("/admin/?partial=1")
    apps = client.get("/admin/apps/")

    assert 'src="/static/lucia/dashboard.js"' in page and 'data-refresh-seconds="30"' in page
    assert partial.status_code == 200 and _card(partial.content.decode(), "overdue")[0] == "2"
    assert "<html" not in partial.content.decode()
    assert apps.status_code == 200 and "/admin/runs/run/" in apps.content.decode()


def test_the_dashboard_needs_a_staff_login(client):
    get_user_model().objects.create_user("customer", password="x" * 16)
    assert client.get("/admin/").status_code == 302
