"""The agent builder's pages around a version (Studio): diff, background simulate with progress, publish, deploy.

A mixin for AgentVersionAdmin. Each view finds the version through the
admin's scoped queryset (another organization's version is a 404), checks
the permission its button needs, calls one domain function
(`simulator.scorecards.request`, `simulator.gate.publish`,
`agents.versions.deploy`) and reports with one message. Publishing and
deploying ask for confirmation on a page of their own first.

It lives here, on the edges' floor, because it drives the simulator and its
publish gate; agents/admin.py (an edge too) mixes it in.
"""

from __future__ import annotations

import difflib

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents import versions
from agents.config import lines
from agents.models import AgentVersion, Deployment, VersionStatus
from agents.staff import visible_organizations
from simulator import case_table, gate, scorecards
from simulator.models import Scorecard, Simulation

CHANGE_VERSION = "agents.change_agentversion"
ADD_DEPLOYMENT = "agents.add_deployment"


class BuilderViews:
    """URLs under a version's change page and the change list's simulate and publish actions; the admin class
    supplies get_queryset and message_user."""

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<int:pk>/diff/", wrap(self.diff_view), name="agents_agentversion_diff"),
            path("<int:pk>/simulate/", wrap(self.simulate_view), name="agents_agentversion_simulate"),
            path("<int:pk>/simulations/<int:simulation_pk>/progress/", wrap(self.progress_view),
                 name="agents_agentversion_progress"),
            path("<int:pk>/publish/", wrap(self.publish_view), name="agents_agentversion_publish"),
            path("<int:pk>/deploy/", wrap(self.deploy_view), name="agents_agentversion_deploy"),
        ] + super().get_urls()

    # --- what the version page shows and offers ------------------------------------------------------------

    def builder_context(self, request: HttpRequest, version: AgentVersion) -> dict:
        """The version page's builder panel: buttons the user may use, the latest simulation and scorecard."""
        simulation = Simulation.objects.filter(version=version, queued_at__isnull=False).order_by("-id").first()
        card = scorecards.latest(version)
        earlier = None if card else Scorecard.objects.filter(version=version).select_related("simulation").first()
        may_build = self.may_build(request, version)
        return {
            "may_build": may_build,
            "may_publish": may_build and version.is_editable and not version.agent.is_template,
            "may_deploy": self.may_deploy(request, version),
            "origin": versions.origin_of(version),
            "simulation": simulation,
            "simulation_active": simulation is not None and simulation.status in scorecards.ACTIVE
            and not scorecards.stalled(simulation),
            "simulation_stalled": simulation is not None and scorecards.stalled(simulation),
            "scorecard": card or earlier,
            "scorecard_is_current": card is not None,
            "case_rows": case_table.rows_for(card or earlier) if (card or earlier) else [],
            "error_lines": self.error_lines(version),
        }

    def error_lines(self, version: AgentVersion) -> list[dict]:
        """The stored config errors, each with the source line it is about (None when no line fits)."""
        return [{**error, "line": lines.line_for(version.source, path=error.get("path", ""),
                                                  message=error.get("message", ""))}
                for error in version.validation_errors or []]

    def may_build(self, request: HttpRequest, version: AgentVersion) -> bool:
        # Templates change only through fixtures/agents/ and `manage.py seed`; superusers may still simulate one.
        user = request.user
        return user.has_perm(CHANGE_VERSION) and (not version.agent.is_template or user.is_superuser)

    def may_deploy(self, request: HttpRequest, version: AgentVersion) -> bool:
        return (request.user.has_perm(ADD_DEPLOYMENT) and version.status == VersionStatus.PUBLISHED
                and not version.agent.is_template)

    # --- views --------------------------------------------------------------------------------------------

    # The change list's actions on the chosen versions (AgentVersionAdmin.actions names them).

    @admin.action(description="Simulate in the background (a scorecard for the gate)", permissions=["change"])
    def simulate(self, request: HttpRequest, queryset) -> None:
        for version in queryset.select_related("agent__organization"):
            if not self.may_build(request, version):
                self.message_user(request, f"{version}: templates are simulated by `manage.py seed`.", messages.ERROR)
                continue
            self._simulate_one(request, version, refused=f"{version}: ",
                               done="{version}: simulation #{simulation.pk} queued ({simulation.cases_total} case(s)); "
                                    "its page shows the progress and the scorecard.")

    def _simulate_one(self, request: HttpRequest, version: AgentVersion, *, refused: str, done: str) -> None:
        """Queue the version's simulation and say so in one message: `refused` + the reason, or `done` formatted
        with the `version` and the `simulation`."""
        try:
            simulation = scorecards.request(version, organization=version.agent.organization, user=request.user)
        except scorecards.SimulationError as refusal:
            self.message_user(request, f"{refused}{refusal}", messages.ERROR)
        else:
            self.message_user(request, done.format(version=version, simulation=simulation), messages.SUCCESS)

    @admin.action(description="Publish (through the gate)…", permissions=["change"])
    def publish(self, request: HttpRequest, queryset) -> TemplateResponse | None:
        chosen = list(queryset.select_related("agent"))
        if request.POST.get("post") != "yes":  # first ask, like Django's "delete selected"
            context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": "Publish?",
                       "versions": [(version, publish_blocker(version, scorecards.latest(version)))
                                    for version in chosen],
                       "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME}
            return TemplateResponse(request, "admin/agents/agentversion/publish_selected.html", context)
        for version in chosen:
            self._publish_one(request, version, refused=f"{version}: publish refused: ", done="Published {}.")
        return None

    def _publish_one(self, request: HttpRequest, version: AgentVersion, *, refused: str, done: str) -> None:
        """Publish through the gate and say so in one message: `refused` + the reason, or `done` with the
        published version in its `{}`."""
        try:
            versions.refuse_template(version.agent)
            published = gate.publish(version, user=request.user)
        except versions.TemplateReadOnly as refusal:
            reason = str(refusal)
        except gate.PublishRefused as refusal:
            reason = refusal.reason
        else:
            self.message_user(request, done.format(published), messages.SUCCESS)
            return
        self.message_user(request, f"{refused}{reason}", messages.ERROR)

    @method_decorator(require_GET)
    def diff_view(self, request: HttpRequest, pk: int) -> TemplateResponse:
        version = self._version(request, pk)
        others = self.get_queryset(request).filter(agent_id=version.agent_id).exclude(pk=version.pk)
        chosen = request.GET.get("against")
        origin = (get_object_or_404(self.get_queryset(request), pk=chosen) if chosen and chosen.isdigit()
                  else versions.origin_of(version))
        if origin is not None and not self.get_queryset(request).filter(pk=origin.pk).exists():
            origin = None  # never show a source from outside the user's scope (templates are inside it)
        old = origin.source if origin else ""
        old_name, new_name = (str(origin) if origin else "(nothing)"), str(version)
        side_by_side = difflib.HtmlDiff(tabsize=2, wrapcolumn=90).make_table(
            old.splitlines(), version.source.splitlines(), fromdesc=old_name, todesc=new_name, context=True,
            numlines=3,
        )
        unified = list(difflib.unified_diff(old.splitlines(), version.source.splitlines(), fromfile=old_name,
                                            tofile=new_name, lineterm=""))
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "original": version,
            "title": f"Changes in {version}", "origin": origin, "others": others.order_by("-number"),
            "side_by_side": side_by_side, "unified": unified, "identical": old == version.source,
            "view": "unified" if request.GET.get("view") == "unified" else "side",
        }
        return TemplateResponse(request, "admin/agents/agentversion/diff.html", context)

    @method_decorator(require_POST)
    def simulate_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        version = self._version(request, pk)
        if not self.may_build(request, version):
            raise PermissionDenied
        self._simulate_one(request, version, refused="Not simulated: ",
                           done="Simulation #{simulation.pk} of {version} queued: {simulation.cases_total} case(s); "
                                "a worker runs them, this page shows its progress.")
        return HttpResponseRedirect(self._change_url(version) + "#lucia-builder")

    @method_decorator(require_GET)
    def progress_view(self, request: HttpRequest, pk: int, simulation_pk: int) -> JsonResponse:
        version = self._version(request, pk)
        simulation = get_object_or_404(Simulation, pk=simulation_pk, version=version)
        card = Scorecard.objects.filter(simulation=simulation).first()
        return JsonResponse({
            "id": simulation.pk, "status": simulation.status, "cases_done": simulation.cases_done,
            "cases_total": simulation.cases_total, "current_case": simulation.current_case,
            "active": simulation.status in scorecards.ACTIVE and not scorecards.stalled(simulation),
            "stalled": scorecards.stalled(simulation), "error": simulation.error,
            "scorecard": card.pk if card else None, "passed": card.passed if card else None,
        })

    @method_decorator(require_http_methods(["GET", "POST"]))
    def publish_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        version = self._version(request, pk)
        if not self.may_build(request, version):
            raise PermissionDenied
        if request.method == "POST":
            self._publish_one(request, version, refused="Not published: ", done="Published {}: deploy it to run it.")
            return HttpResponseRedirect(self._change_url(version))
        card = scorecards.latest(version)
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "original": version,
            "title": f"Publish {version}?", "scorecard": card, "blocked": publish_blocker(version, card),
        }
        return TemplateResponse(request, "admin/agents/agentversion/publish_confirm.html", context)

    @method_decorator(require_http_methods(["GET", "POST"]))
    def deploy_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        version = self._version(request, pk)
        if not self.may_deploy(request, version):
            raise PermissionDenied
        # An organization runs only its own agents, so the choice is the owner, when the user works for it.
        choices = visible_organizations(request.user).filter(pk=version.agent.organization_id)
        if request.method == "POST":
            organization = choices.filter(pk=request.POST.get("organization") or None).first()
            if organization is None:
                self.message_user(request, "Choose one of your organizations to deploy to.", messages.ERROR)
                return HttpResponseRedirect(reverse("admin:agents_agentversion_deploy", args=[version.pk]))
            try:
                versions.deploy(organization, version)
            except versions.NotDeployable as refused:
                self.message_user(request, f"Not deployed: {refused}", messages.ERROR)
            else:
                self.message_user(request, f"Deployed {version.agent.slug} v{version.number} to {organization.slug}: "
                                  "new runs there use it; running ones keep their version.", messages.SUCCESS)
            return HttpResponseRedirect(self._change_url(version))
        active = {deployment.organization_id: deployment for deployment in Deployment.objects.filter(
            organization__in=choices, agent_id=version.agent_id, active=True).select_related("version")}
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "original": version,
            "title": f"Deploy {version}?",
            "choices": [(organization, active.get(organization.pk)) for organization in choices],
        }
        return TemplateResponse(request, "admin/agents/agentversion/deploy_confirm.html", context)

    # --- shared -------------------------------------------------------------------------------------------

    def _version(self, request: HttpRequest, pk: int) -> AgentVersion:
        version = self.get_queryset(request).select_related("agent__organization").filter(pk=pk).first()
        if version is None:
            raise Http404("No such agent version.")
        if not self.has_view_permission(request, version):
            raise PermissionDenied
        return version

    def _change_url(self, version: AgentVersion) -> str:
        return reverse("admin:agents_agentversion_change", args=[version.pk])


def publish_blocker(version: AgentVersion, card: Scorecard | None) -> str:
    """Why the gate will refuse, known before asking it (the gate still decides): '' when nothing is in the way."""
    if version.status != VersionStatus.DRAFT:
        return f"{version} is {version.status}; only drafts are published."
    if not version.is_valid:
        return f"{version} has config errors: fix them and validate."
    if card is None:
        return "No scorecard for the current config: simulate it first."
    if not card.passed:
        return f"The latest scorecard (#{card.pk}) failed: fix the failing cases and simulate again."
    return ""
