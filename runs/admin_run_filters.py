"""The run list's filters for what needs attention; each is the dashboard's query (runs.attention)."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from runs import attention
from runs.models import Run


class AttentionFilter(admin.SimpleListFilter):
    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("overdue", "Overdue"), ("stuck", "Stuck (expired lease or episode past its lease)"),
                ("failed", "Failed episode")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run] | None:
        if self.value() == "overdue":
            return attention.overdue(queryset, now=attention.database_now())
        if self.value() == "stuck":
            return attention.stuck(queryset, now=attention.database_now())
        if self.value() == "failed":
            return attention.failed(queryset)
        return None


class WaitingOnHumanFilter(admin.SimpleListFilter):
    title = "waiting on a human for more than"
    parameter_name = "waiting_human_hours"
    HOURS = ["1", "4", "24", "72"]

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [(hours, f"{hours} h") for hours in self.HOURS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run] | None:
        if self.value() in self.HOURS:
            return attention.waiting_on_human(queryset, now=attention.database_now(), hours=float(self.value()))
        return None


class WorkFilter(admin.SimpleListFilter):
    """Live work (no simulated run, no sandbox organization), as the dashboard counts it by default."""

    title = "work"
    parameter_name = "work"

    def lookups(self, request: HttpRequest, model_admin) -> list[tuple[str, str]]:
        return [("live", "Live organizations"), ("simulated", "Simulated and sandbox")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run] | None:
        if self.value() == "live":
            return attention.live_runs(queryset, include_simulated=False)
        if self.value() == "simulated":
            return queryset.exclude(pk__in=attention.live_runs(queryset, include_simulated=False).values("pk"))
        return None
