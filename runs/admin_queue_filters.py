"""The review queue's filters. Their query parameters are the queue's public links (the dashboard uses them):

    ?status=open|answered|resolved|cancelled|closed   ?kind=<EscalationKind>   ?organization=<id>
    ?assignee=mine|unassigned   ?sla=breached|within   ?sim=include|only
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from agents import staff
from runs import review_queue
from runs.models import EscalationKind, EscalationStatus


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [*EscalationStatus.choices, ("closed", "Closed (any)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "closed":
            return queryset.exclude(status=EscalationStatus.OPEN)
        if self.value() in EscalationStatus.values:
            return queryset.filter(status=self.value())
        return queryset


class KindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return EscalationKind.choices

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        return queryset.filter(kind=self.value()) if self.value() in EscalationKind.values else queryset


class OrganizationFilter(admin.SimpleListFilter):
    """Only the organizations the user may see are offered (agents.staff)."""

    title = "organization"
    parameter_name = "organization"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [(str(org.pk), str(org)) for org in staff.visible_organizations(request.user).order_by("name")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        return queryset.filter(organization_id=int(value)) if value and value.isdigit() else queryset


class AssigneeFilter(admin.SimpleListFilter):
    title = "assignee"
    parameter_name = "assignee"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("mine", "Mine"), ("unassigned", "Unassigned")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "mine":
            return queryset.filter(assignee=request.user)
        if self.value() == "unassigned":
            return queryset.filter(assignee__isnull=True)
        return queryset


class SlaFilter(admin.SimpleListFilter):
    """Open escalations past (or within) their SLA: the agent's followup.escalation_sla, default 4h."""

    title = "SLA"
    parameter_name = "sla"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("breached", "Breached"), ("within", "Within the SLA")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "breached":
            return review_queue.breached(queryset)
        if self.value() == "within":
            return review_queue.within_sla(queryset)
        return queryset


class SimulatedFilter(admin.SimpleListFilter):
    """Simulated runs' escalations are the simulator's to answer: hidden unless asked for."""

    title = "simulated runs"
    parameter_name = "sim"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("include", "Include simulated"), ("only", "Only simulated")]

    def choices(self, changelist):
        for choice in super().choices(changelist):
            if choice["display"] == "All":
                choice["display"] = "Live only"
            yield choice

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "include":
            return queryset
        if self.value() == "only":
            return queryset.filter(run__sim=True)
        return queryset.exclude(run__sim=True)


QUEUE_FILTERS = [StatusFilter, KindFilter, SlaFilter, AssigneeFilter, OrganizationFilter, SimulatedFilter]
