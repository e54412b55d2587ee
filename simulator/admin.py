"""The Studio's simulator pages: simulations and scorecards (read-only evidence), eval cases to approve.

Writes go through simulator.generator; scorecards and simulations are only
ever written by simulator.scorecards, so their pages are view-only.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest

from agents.staff import OrganizationScopedAdmin
from simulator import case_table, generator
from simulator.models import EvalCase, EvalCaseStatus, Scorecard, Simulation


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Simulation)
class SimulationAdmin(OrganizationScopedAdmin, ReadOnlyAdmin):
    # The builder's organization (the row's own is the simulation's shadow organization); templates' for all.
    organization_path, unowned_visible = "version__agent__organization", True
    list_display = ["id", "version", "organization", "status", "progress", "seed", "weeks", "started_at",
                    "finished_at"]
    list_filter = ["status", "version__agent"]
    list_select_related = ["version__agent", "organization"]
    search_fields = ["version__agent__slug", "organization__slug"]
    raw_id_fields = ["version", "organization"]
    fields = ["version", "organization", "status", "cases_done", "cases_total", "current_case", "error", "seed",
              "weeks", "queued_at", "requested_by", "started_at", "finished_at", "results"]

    @admin.display(description="cases done")
    def progress(self, simulation: Simulation) -> str:
        return f"{simulation.cases_done}/{simulation.cases_total}"


@admin.register(Scorecard)
class ScorecardAdmin(OrganizationScopedAdmin, ReadOnlyAdmin):
    organization_path, unowned_visible = "version__agent__organization", True
    list_display = ["id", "version", "verdict", "case_count", "short_hash", "seed", "created_at"]
    list_filter = ["passed", "version__agent"]
    list_select_related = ["version__agent"]
    search_fields = ["version__agent__slug", "config_hash"]
    raw_id_fields = ["version", "simulation"]
    fields = ["version", "config_hash", "passed", "seed", "simulation", "created_at", "metrics"]
    change_form_template = "admin/simulator/scorecard/change_form.html"

    class Media:
        css = {"all": ["lucia/builder.css"]}

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        scorecard = self.get_object(request, object_id)
        if scorecard is not None:
            extra_context = {**(extra_context or {}), "scorecard": scorecard,
                             "case_rows": case_table.rows_for(scorecard)}
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="result", boolean=True, ordering="passed")
    def verdict(self, scorecard: Scorecard) -> bool:
        return scorecard.passed

    @admin.display(description="cases")
    def case_count(self, scorecard: Scorecard) -> str:
        passed = sum(1 for case in scorecard.cases if case.get("passed"))
        return f"{passed}/{len(scorecard.cases)}"

    @admin.display(description="hash")
    def short_hash(self, scorecard: Scorecard) -> str:
        return scorecard.config_hash[:12]


@admin.register(EvalCase)
class EvalCaseAdmin(OrganizationScopedAdmin, admin.ModelAdmin):
    organization_path, unowned_visible = "agent__organization", True
    list_display = ["name", "agent", "kind", "status", "version", "approved_by", "created_at"]
    list_filter = ["status", "kind", "agent"]
    list_select_related = ["agent", "version__agent", "approved_by"]
    search_fields = ["name", "agent__slug"]
    raw_id_fields = ["agent", "version"]
    readonly_fields = ["kind", "status", "approved_by", "created_at"]
    actions = ["approve", "reject"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # cases come from the generator or a version's config

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        # A decided case is evidence (a view-only page); a template's cases are only superusers' to decide.
        if obj is not None and (obj.status != EvalCaseStatus.PROPOSED or not self._may_decide(request, obj)):
            return False
        return super().has_change_permission(request, obj)

    def _may_decide(self, request: HttpRequest, case: EvalCase) -> bool:
        return request.user.is_superuser or not case.agent.is_template

    @admin.action(description="Approve (counts in scorecards)", permissions=["change"])
    def approve(self, request: HttpRequest, queryset) -> None:
        self._decide(request, queryset, decide=generator.approve, verb="Approved")

    @admin.action(description="Reject", permissions=["change"])
    def reject(self, request: HttpRequest, queryset) -> None:
        self._decide(request, queryset, decide=generator.reject, verb="Rejected")

    def _decide(self, request: HttpRequest, queryset, *, decide, verb: str) -> None:
        done = 0
        for case in queryset.select_related("agent"):
            if not self._may_decide(request, case):
                self.message_user(request, f"{case.name} is a template's case: only a superuser decides it.",
                                  messages.ERROR)
                continue
            try:
                decide(case, user=request.user)
            except generator.CaseDecisionError as refused:
                self.message_user(request, str(refused), messages.ERROR)
            else:
                done += 1
        if done:
            self.message_user(request, f"{verb} {done} case(s).", messages.SUCCESS)
