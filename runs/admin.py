"""The Studio's runtime screens: runs, episodes, journal, outbox (read-only) and escalation routes.

The escalation review queue is runs.admin_queue (imported here so the admin registers it).
"""

from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.utils import display_for_value
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from agents.staff import OrganizationScopedAdmin
from runs import admin_queue, attention, cancellation, escalation_routes  # noqa: F401 (admin_queue registers the queue)
from runs.admin_run_filters import AttentionFilter, WaitingOnHumanFilter, WorkFilter
from runs.admin_run_operations import CancelForm, EventForm, RunOperations
from runs.models import (
    Contact,
    Episode,
    EpisodeStatus,
    EscalationRoute,
    JournalEntry,
    OutboxMessage,
    Run,
    Task,
)
from runs.timeline import by_episode, timeline_for


class ReadOnlyAdmin(admin.ModelAdmin):
    """Runtime rows are written by the runtime only; the Studio shows them."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


class ContactInline(ReadOnlyInline):
    model = Contact
    fields = ["role", "name", "email", "phone", "slack_user", "timezone"]


class TaskInline(ReadOnlyInline):
    model = Task
    fields = ["key", "title", "required", "status", "done_evidence", "done_at"]


class EpisodeInline(ReadOnlyInline):
    model = Episode
    fields = ["seq", "kind", "status", "due_at", "attempts", "error"]
    ordering = ["seq"]


@admin.register(Run)
class RunAdmin(OrganizationScopedAdmin, RunOperations, ReadOnlyAdmin):
    """Runs, read-only: the page leads with status, operations and the timeline; state changes go through
    the operations (runs.admin_run_operations), never through a Save."""

    list_display = ["id", "organization", "agent_version", "status", "wake_when", "next_wake_at", "lease_owner",
                    "lease_expires_at", "last_heartbeat", "sim", "created_at"]
    list_filter = [AttentionFilter, WaitingOnHumanFilter, WorkFilter, "status", "sim", "organization",
                   "version__agent"]
    search_fields = ["=id", "external_ref", "goal", "contacts__email", "contacts__phone", "contacts__name"]
    list_select_related = ["organization", "version__agent"]
    date_hierarchy = "created_at"
    inlines = [ContactInline, TaskInline, EpisodeInline]
    actions = ["cancel_runs"]
    change_form_template = "admin/runs/run/change_form.html"
    fieldsets = [
        (None, {"fields": ["organization", "agent_version", "goal", "external_ref", "status", "wake_when",
                           "next_wake_at", "outcome", "sim", "virtual_now", "timeline_link"]}),
        ("Lease", {"fields": ["lease_owner", "lease_epoch", "lease_expires_at", "last_heartbeat",
                              "advance_enqueued_at"]}),
        ("Usage", {"fields": ["steps_used", "step_budget", "tokens_used", "token_budget", "cost_used",
                              "cost_budget"]}),
        ("Who and when", {"fields": ["deployment", "started_by", "started_by_key", "cancelled_by",
                                     "cancelled_by_key", "created_at", "updated_at", "ended_at"]}),
        ("Plan, inputs and state", {"classes": ["collapse"], "fields": ["plan", "inputs", "state"]}),
    ]

    @admin.display(description="agent")
    def agent_version(self, run: Run) -> str:
        return f"{run.version.agent.slug} v{run.version.number}"

    @admin.display(description="last heartbeat")
    def last_heartbeat(self, run: Run) -> str:
        # Each heartbeat sets the expiry one lease length ahead (runs.leases.renew), so the last one is read back.
        if run.lease_owner is None or run.lease_expires_at is None:
            return "-"
        return display_for_value(run.lease_expires_at - timedelta(seconds=settings.LUCIA_LEASE_SECONDS), "-")

    @admin.display(description="timeline")
    def timeline_link(self, run: Run) -> str:
        return format_html('<a href="{}">Open the timeline</a>', reverse("admin:runs_run_timeline", args=[run.pk]))

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [field.name for field in Run._meta.fields] + ["agent_version", "last_heartbeat", "timeline_link"]

    def get_urls(self):
        return [path("<int:run_id>/timeline/", self.admin_site.admin_view(self.timeline_view),
                     name="runs_run_timeline"), *self.operation_urls()] + super().get_urls()

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        run = self.get_queryset(request).filter(pk=object_id).first() if str(object_id).isdigit() else None
        if run is not None:
            extra_context = {**(extra_context or {}), **self._story(run),
                             "may_operate": self.may_operate(request) and run.is_open,
                             "last_heartbeat": self.last_heartbeat(run),
                             "failed_episodes": list(attention.unrecovered_failures(run.episodes.all())),
                             "queued_episodes": list(run.episodes.filter(status=EpisodeStatus.QUEUED)),
                             "event_kinds": EventForm.base_fields["kind"].choices,
                             "event_channels": EventForm.base_fields["channel"].choices}
        return super().change_view(request, object_id, form_url, extra_context)

    def timeline_view(self, request: HttpRequest, run_id: int) -> TemplateResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = self.get_queryset(request).select_related("version__agent", "organization").filter(pk=run_id).first()
        if run is None:
            raise Http404(f"No run {run_id} in your organizations.")
        context = {**self.admin_site.each_context(request), **self._story(run), "run": run,
                   "opts": Run._meta, "title": f"Timeline of run {run.pk}"}
        return TemplateResponse(request, "admin/runs/run/timeline.html", context)

    def _story(self, run: Run) -> dict:
        return {"timeline_groups": by_episode(timeline_for(run)), "run_timezone": run.organization.default_timezone}

    @admin.action(description="Cancel the selected runs (asks for a reason)", permissions=["operate"])
    def cancel_runs(self, request: HttpRequest, queryset) -> HttpResponse:
        runs = list(queryset)
        form = CancelForm(request.POST if request.POST.get("confirmed") else None)
        if form.is_bound and form.is_valid():
            return self.cancel_with_reason(request, runs, reason=form.cleaned_data["reason"])
        return self.cancel_confirmation(request, runs, form)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return self.may_operate(request)


@admin.register(Episode)
class EpisodeAdmin(OrganizationScopedAdmin, ReadOnlyAdmin):
    organization_path = "run__organization"
    list_display = ["id", "run", "seq", "kind", "status", "due_at", "attempts"]
    list_filter = ["status", "kind"]
    search_fields = ["=run__id", "dedupe_key"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]


@admin.register(JournalEntry)
class JournalEntryAdmin(OrganizationScopedAdmin, ReadOnlyAdmin):
    organization_path = "run__organization"
    list_display = ["id", "run", "seq", "kind", "model_provider", "model_name", "tokens_in", "tokens_out", "at"]
    list_filter = ["kind", "model_provider"]
    search_fields = ["=run__id", "request_hash"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "episode"]


@admin.register(OutboxMessage)
class OutboxMessageAdmin(OrganizationScopedAdmin, ReadOnlyAdmin):
    organization_path = "run__organization"
    list_display = ["id", "run", "tool", "channel", "recipient", "status", "attempts", "created_at", "sent_at"]
    list_filter = ["status", "channel", "tool"]
    search_fields = ["=run__id", "recipient", "idem_key", "provider_message_id"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "episode"]


CHANNELS = [("email", "email"), ("sms", "SMS"), ("voice", "voice"), ("slack", "Slack")]


class EscalationRouteForm(forms.ModelForm):
    class Meta:
        model = EscalationRoute
        fields = ["organization", *escalation_routes.FIELDS]

    def clean(self) -> dict:
        data = super().clean()
        organization = data.get("organization") or getattr(self.instance, "organization", None)
        if organization is None or self.errors:
            return data
        try:
            data.update(escalation_routes.check_route(
                organization, **{name: data.get(name) or default for name, default in ROUTE_DEFAULTS.items()}))
        except escalation_routes.RouteRefused as refused:
            self.add_error(refused.field if refused.field in self.fields else None, refused.message)
        return data


ROUTE_DEFAULTS = {"email_identity": None, "email_to": "", "slack_identity": None, "slack_channel": "",
                  "timezone": "UTC", "quiet_start": None, "quiet_end": None}


@admin.register(EscalationRoute)
class EscalationRouteAdmin(OrganizationScopedAdmin, admin.ModelAdmin):
    """Where each organization's escalations are announced (runs.notifications); the API sets the same rows."""

    form = EscalationRouteForm
    list_display = ["organization", "email_to", "slack_channel", "timezone", "quiet_start", "quiet_end"]
    list_select_related = ["organization"]
    raw_id_fields = ["email_identity", "slack_identity"]

    def save_model(self, request: HttpRequest, obj: EscalationRoute, form: EscalationRouteForm, change: bool) -> None:
        # The one writer: the form's values, checked again there.
        route = escalation_routes.set_route(
            obj.organization, **{name: form.cleaned_data.get(name) or default
                                 for name, default in ROUTE_DEFAULTS.items()})
        obj.pk = route.pk
