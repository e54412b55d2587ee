"""The Studio's landing page: everything that needs a person, each count a link to the list behind it.

Reads only (runs.attention, runs.health); scoped to the user's organizations
(agents.staff) and to what their permissions let them view. Live work by
default; `?sim=1` adds simulated runs and sandbox organizations. The page
polls itself (`?partial=1` renders the panels alone) so it stays current.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from agents.staff import scope_to_user
from runs import attention, health
from runs.models import Episode, Escalation, EscalationStatus, Run

# Rows listed under each count; the count itself is always the full number.
LISTED = 20
REFRESH_SECONDS = 30


def render(request: HttpRequest, *, site: AdminSite) -> HttpResponse:
    include_simulated = request.GET.get("sim") == "1"
    context = {
        **site.each_context(request),
        "title": "Needs attention",
        "include_simulated": include_simulated,
        "refresh_seconds": REFRESH_SECONDS,
        "toggle_url": "?" + ("" if include_simulated else "sim=1"),
        **panels(request, include_simulated=include_simulated),
    }
    template = "admin/lucia/dashboard_panels.html" if request.GET.get("partial") else "admin/lucia/dashboard.html"
    return TemplateResponse(request, template, context)


def panels(request: HttpRequest, *, include_simulated: bool) -> dict:
    user = request.user
    can_see_runs = user.has_perm("runs.view_run")
    can_see_escalations = user.has_perm("runs.view_escalation")
    context = {"can_see_runs": can_see_runs, "can_see_escalations": can_see_escalations}
    if not (can_see_runs or can_see_escalations):
        return context
    now = attention.database_now()
    context["now"] = now
    if can_see_escalations:
        context.update(_escalations(request, now=now, include_simulated=include_simulated))
    if can_see_runs:
        context.update(_runs(request, now=now, include_simulated=include_simulated))
        # The same report as /healthz/: the workers are shared by every organization.
        context["health"] = health.report()
    return context


def _escalations(request: HttpRequest, *, now, include_simulated: bool) -> dict:
    rows = attention.live_escalations(scope_to_user(Escalation.objects.all(), request.user),
                                      include_simulated=include_simulated)
    opened = attention.open_escalations(rows, now=now)
    changelist = reverse("admin:runs_escalation_changelist")
    # The review queue's own filters (runs.admin_queue_filters); it hides simulated work unless asked.
    queue = {"status": EscalationStatus.OPEN, **({"sim": "include"} if include_simulated else {})}
    kinds = [{"summary": summary, "url": _url(changelist, **queue, kind=summary.kind)}
             for summary in attention.by_kind(opened)]
    return {
        "escalations_open": len(opened),
        "escalations_breached": sum(item.breached for item in opened),
        "escalations_url": _url(changelist, **queue),
        "escalation_kinds": kinds,
        "oldest_escalations": opened[:LISTED],
    }


def _runs(request: HttpRequest, *, now, include_simulated: bool) -> dict:
    runs = attention.live_runs(scope_to_user(Run.objects.all(), request.user), include_simulated=include_simulated)
    runs = runs.select_related("organization", "version__agent")
    overdue = attention.overdue(runs, now=now)
    stuck = attention.stuck(runs, now=now)
    failed_runs = attention.failed(runs)
    failures = (attention.unrecovered_failures(Episode.objects.filter(run__in=runs.values("pk")))
                .select_related("run__organization").order_by("-finished_at", "-pk"))
    changelist = reverse("admin:runs_run_changelist")
    work = {} if include_simulated else {"work": "live"}
    return {
        "overdue_count": overdue.count(),
        "overdue_url": _url(changelist, attention="overdue", **work),
        "overdue_runs": [{"run": run, "lag": now - run.first_due}
                         for run in attention.with_first_due(overdue).order_by("first_due", "pk")[:LISTED]],
        "stuck_count": stuck.count(),
        "stuck_url": _url(changelist, attention="stuck", **work),
        "stuck_runs": list(attention.with_running_since(stuck).order_by("lease_expires_at", "pk")[:LISTED]),
        "failed_count": failed_runs.count(),
        "failed_url": _url(changelist, attention="failed", **work),
        "failed_episodes": list(failures[:LISTED]),
    }


def _url(path: str, **params: str) -> str:
    return f"{path}?{urlencode(params)}"
