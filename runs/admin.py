"""The Studio's runtime screens: runs, episodes, journal, outbox (read-only) and escalation routes.

The escalation review queue is runs.admin_queue (imported here so the admin registers it).
"""

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from runs import admin_queue, cancellation, escalation_routes  # noqa: F401 (admin_queue registers the queue)
from runs.models import (
    Contact,
    Episode,
    EscalationRoute,
    JournalEntry,
    OutboxMessage,
    Run,
    Task,
)
from runs.timeline import timeline_for


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
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "organization", "agent_version", "status", "wake_when", "next_wake_at", "sim", "created_at"]
    list_filter = ["status", "sim", "organization", "version__agent"]
    search_fields = ["=id", "external_ref", "goal", "contacts__email", "contacts__phone", "contacts__name"]
    list_select_related = ["organization", "version__agent"]
    date_hierarchy = "created_at"
    inlines = [ContactInline, TaskInline, EpisodeInline]
    actions = ["cancel_runs"]
    readonly_fields = ["timeline_link"]

    @admin.display(description="agent")
    def agent_version(self, run: Run) -> str:
        return f"{run.version.agent.slug} v{run.version.number}"

    @admin.display(description="timeline")
    def timeline_link(self, run: Run) -> str:
        return format_html('<a href="{}">Open the timeline</a>', reverse("admin:runs_run_timeline", args=[run.pk]))

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        # Viewing is allowed; every field is read-only (the actions change state through runs.*).
        return request.user.has_perm("runs.view_run")

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [field.name for field in Run._meta.fields] + ["timeline_link"]

    def get_urls(self):
        return [path("<int:run_id>/timeline/", self.admin_site.admin_view(self.timeline_view),
                     name="runs_run_timeline")] + super().get_urls()

    def timeline_view(self, request: HttpRequest, run_id: int) -> TemplateResponse:
        run = Run.objects.select_related("version__agent", "organization").get(pk=run_id)
        context = {**self.admin_site.each_context(request), "run": run, "items": timeline_for(run),
                   "opts": Run._meta, "title": f"Timeline of run {run.pk}"}
        return TemplateResponse(request, "admin/runs/run/timeline.html", context)

    @admin.action(description="Cancel the selected runs")
    def cancel_runs(self, request: HttpRequest, queryset) -> None:
        cancelled = 0
        for run in queryset:
            try:
                cancellation.cancel_run(run, reason=f"cancelled in the Studio by {request.user}", by_user=request.user)
                cancelled += 1
            except cancellation.RunNotOpen as error:
                self.message_user(request, str(error), messages.WARNING)
        self.message_user(request, f"Cancelled {cancelled} run(s).", messages.SUCCESS)


@admin.register(Episode)
class EpisodeAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "seq", "kind", "status", "due_at", "attempts"]
    list_filter = ["status", "kind"]
    search_fields = ["=run__id", "dedupe_key"]
    list_select_related = ["run"]
    raw_id_fields = ["run"]


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "seq", "kind", "model_provider", "model_name", "tokens_in", "tokens_out", "at"]
    list_filter = ["kind", "model_provider"]
    search_fields = ["=run__id", "request_hash"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "episode"]


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "tool", "channel", "recipient", "status", "attempts", "created_at", "sent_at"]
    list_filter = ["status", "channel", "tool"]
    search_fields = ["=run__id", "recipient", "idem_key", "provider_message_id"]
    list_select_related = ["run"]
    raw_id_fields = ["run", "episode"]


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
class EscalationRouteAdmin(admin.ModelAdmin):
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
