"""The Studio's runtime screens: runs, episodes, journal, outbox (read-only) and the escalation inbox."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from agents.staff import OrganizationScopedAdmin
from runs import answers, cancellation, escalation_routes, escalations, events
from runs.models import (
    Contact,
    Episode,
    Escalation,
    EscalationKind,
    EscalationRoute,
    EscalationStatus,
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
class RunAdmin(OrganizationScopedAdmin, ReadOnlyAdmin):
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
        # Operating (the actions, through runs.*) needs change_run; the page itself is never saved: no Save.
        return obj is None and request.user.has_perm("runs.change_run")

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [field.name for field in Run._meta.fields] + ["timeline_link"]

    def get_urls(self):
        return [path("<int:run_id>/timeline/", self.admin_site.admin_view(self.timeline_view),
                     name="runs_run_timeline")] + super().get_urls()

    def timeline_view(self, request: HttpRequest, run_id: int) -> TemplateResponse:
        run = self.get_queryset(request).select_related("version__agent", "organization").filter(pk=run_id).first()
        if run is None:
            raise Http404(f"No run {run_id} in your organizations.")
        if not self.has_view_permission(request, run):
            raise PermissionDenied
        context = {**self.admin_site.each_context(request), "run": run, "items": timeline_for(run),
                   "opts": Run._meta, "title": f"Timeline of run {run.pk}"}
        return TemplateResponse(request, "admin/runs/run/timeline.html", context)

    @admin.action(description="Cancel the selected runs", permissions=["change"])
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


class AnswerForm(forms.Form):
    """The text and data an option may need (runs.answer_options); the pressed button names the option."""

    text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
                           help_text="The answer, guidance for the agent, the reply, or the reason.")
    role = forms.CharField(required=False, help_text="The contact's role, when the escalation names none.")
    channel = forms.ChoiceField(required=False, choices=[("", "—"), *CHANNELS])
    channels = forms.MultipleChoiceField(required=False, choices=CHANNELS, widget=forms.CheckboxSelectMultiple,
                                         help_text="stop_contacting: none ticked means every channel.")
    address = forms.CharField(required=False, help_text="use_contact: the new email address or phone number.")
    task_key = forms.CharField(required=False)
    subject = forms.CharField(required=False, help_text="reply_to_contact by email.")
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def answer_data(self) -> dict:
        data = {name: value for name in ("role", "channel", "address", "task_key", "subject")
                if (value := self.cleaned_data.get(name))}
        if self.cleaned_data.get("channels"):
            data["channels"] = list(self.cleaned_data["channels"])
        if self.cleaned_data.get("confirm"):
            data["confirm"] = True
        return data


@admin.register(Escalation)
class EscalationAdmin(OrganizationScopedAdmin, ReadOnlyAdmin):
    """The escalation inbox: open questions first; answer or resolve from the change page."""

    list_display = ["id", "organization", "kind", "channel", "status", "run", "short_prompt", "created_at"]
    list_filter = ["status", "kind", "channel", "organization"]
    search_fields = ["=id", "=run__id", "prompt"]
    list_select_related = ["organization", "run"]
    raw_id_fields = ["run", "episode", "outbox_message"]
    ordering = ["status", "-created_at"]
    change_form_template = "admin/runs/escalation/change_form.html"

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.has_perm("runs.change_escalation")

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [field.name for field in Escalation._meta.fields]

    @admin.display(description="prompt")
    def short_prompt(self, escalation: Escalation) -> str:
        return escalation.prompt[:80]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        escalation = self.get_object(request, object_id)
        if request.method == "POST" and not self.has_change_permission(request, escalation):
            raise PermissionDenied  # settling needs runs.change_escalation
        form = AnswerForm(request.POST or None)
        preview = None
        if escalation is not None and request.method == "POST":
            response, preview = self._settle(request, escalation, form)
            if response is not None:
                return response
            # Refused or closed: show the page again with the message, never the ModelForm's save path.
            request.method = "GET"
        extra_context = {**(extra_context or {}), "answer_form": form, "preview": preview,
                         "is_open": escalation is not None and escalation.status == EscalationStatus.OPEN
                         and self.has_change_permission(request, escalation),
                         "is_uncertain_send": escalation is not None
                         and escalation.kind == EscalationKind.UNCERTAIN_SEND,
                         "is_approval": escalation is not None and escalation.kind == EscalationKind.APPROVAL}
        return super().change_view(request, object_id, form_url, extra_context)

    def _settle(self, request: HttpRequest, escalation: Escalation, form: AnswerForm):
        """(a redirect once acted on, or None; the reply preview to confirm, or None)."""
        option = request.POST.get("_option") or request.POST.get("_resolve") or ""
        if not form.is_valid():
            return None, None
        try:
            answers.answer(escalation, option=option, text=form.cleaned_data["text"], data=form.answer_data(),
                           by_user=request.user, via="admin")
        except answers.AnswerRefused as refused:
            self.message_user(request, refused.message, messages.WARNING if refused.preview else messages.ERROR)
            return None, refused.preview
        except (escalations.EscalationClosed, cancellation.RunNotOpen, events.RunEnded) as error:
            self.message_user(request, str(error), messages.ERROR)
            return None, None
        self.message_user(request, f"Escalation {escalation.pk}: {option} done.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:runs_escalation_changelist") + "?status__exact=open"), None


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
