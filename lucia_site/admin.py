"""The Studio's inbound and compliance pages: inbound messages (attach to a run, dismiss), suppressions (lift),
lifted suppressions, and delivery events.

Here, above runs/, because attaching a message makes a run's episode
(runs.inbound_triage) and a delivery event belongs to an organization only
through the send it reports on. Pages are scoped to the user's organizations
(agents.staff) and read-only: rows change only through the buttons, each
checking its permission and writing through its domain module.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from agents.staff import OrganizationScopedAdmin, scope_to_user
from connectors import suppressions
from connectors.models import DeliveryEvent, InboundMessage, InboundStatus, Suppression, SuppressionLift
from runs import inbound_triage
from runs.models import OutboxMessage, Run

SUGGESTED_RUNS = 10


class ShownNotEdited(admin.ModelAdmin):
    """Rows written only by domain modules: no add, no Save, no delete; the page's own buttons act."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return [*self.get_fields(request, obj)]


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 70, "id": "studio-reason"}),
                             help_text="Kept with your name and the time.")


def ask_reason(model_admin: admin.ModelAdmin, request: HttpRequest, rows: list, *, title: str, verb: str,
               done: str, act, action: str = "") -> HttpResponse | None:
    """The page asking why before `act(row, reason)` runs on each row; None once acted (the caller redirects).

    `action`: the changelist action that led here (its selection is posted again); empty for a single row's page.
    One message per outcome: the rows done, and each refusal with its reason.
    """
    form = ReasonForm(request.POST if "reason" in request.POST else None)
    if form.is_valid():
        acted = []
        for row in rows:
            try:
                act(row, form.cleaned_data["reason"])
            except (inbound_triage.TriageRefused, suppressions.LiftRefused) as refused:
                model_admin.message_user(request, f"{row}: {refused}", messages.ERROR)
            else:
                acted.append(str(row))
        if acted:
            model_admin.message_user(request, f"{done}: {'; '.join(acted)}.", messages.SUCCESS)
        return None
    context = {**model_admin.admin_site.each_context(request), "title": title, "rows": rows, "form": form,
               "verb": verb, "action": action, "opts": model_admin.model._meta,
               "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME}
    return TemplateResponse(request, "admin/lucia/ask_reason.html", context)


class StudioObjectViews:
    """A row's own page (`<id>/<name>/`): found in the user's scope (404 otherwise), permission checked (403)."""

    def object_or_404(self, request: HttpRequest, object_id: str):
        row = self.get_object(request, object_id)
        if row is None:
            raise Http404(f"No {self.model._meta.verbose_name} {object_id} in your organizations.")
        return row

    def row_url(self, row, name: str) -> str:
        opts = self.model._meta
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_{name}", args=[row.pk])

    def changelist_url(self) -> str:
        opts = self.model._meta
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")


# --- Inbound messages ------------------------------------------------------------------------------------------


class AttachForm(forms.Form):
    run = forms.IntegerField(label="Run id", min_value=1, widget=forms.NumberInput(attrs={"id": "attach-run-id"}),
                             help_text="An open run of the message's organization; or press a suggested run.")
    note = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2, "cols": 70}),
                           help_text="Optional: why this run (kept with your name and the time).")


@admin.register(InboundMessage)
class InboundMessageAdmin(OrganizationScopedAdmin, StudioObjectViews, ShownNotEdited):
    list_display = ["received_at", "channel", "from_address", "to_address", "summary", "status", "organization",
                    "run_link", "triage_buttons"]
    list_filter = ["status", "channel", "organization"]
    list_select_related = ["organization", "triaged_by"]
    search_fields = ["from_address", "to_address", "subject", "=provider_id"]
    date_hierarchy = "received_at"
    fields = ["status", "organization", "channel", "received_at", "from_address", "to_address", "subject", "text",
              "attachments", "run_link", "triaged_by", "triaged_at", "triage_note", "provider_id", "kind",
              "headers", "raw"]
    actions = ["dismiss_selected"]
    change_form_template = "admin/connectors/inboundmessage/change_form.html"

    def may_triage(self, request: HttpRequest) -> bool:
        return request.user.has_perm("connectors.change_inboundmessage")

    def has_dismiss_permission(self, request: HttpRequest) -> bool:
        return self.may_triage(request)

    @admin.display(description="message")
    def summary(self, message: InboundMessage) -> str:
        return (message.subject or message.text)[:80]

    @admin.display(description="run")
    def run_link(self, message: InboundMessage) -> str:
        if message.matched_run_id is None:
            return "-"
        return format_html('<a href="{}">run {}</a>', reverse("admin:runs_run_timeline", args=[message.matched_run_id]),
                           message.matched_run_id)

    def get_list_display(self, request: HttpRequest) -> list:
        # The buttons' column only for users who may press them.
        return self.list_display if self.may_triage(request) else self.list_display[:-1]

    @admin.display(description="triage")
    def triage_buttons(self, message: InboundMessage) -> str:
        if message.status != InboundStatus.UNMATCHED:
            return ""
        return format_html('<a class="button" href="{}" data-attach="{}">Attach…</a> '
                           '<a class="button" href="{}" data-dismiss="{}">Dismiss…</a>',
                           self.row_url(message, "attach"), message.pk, self.row_url(message, "dismiss"), message.pk)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        message = self.get_object(request, object_id)
        may = message is not None and message.status == InboundStatus.UNMATCHED and self.may_triage(request)
        extra_context = {**(extra_context or {}), "may_triage": may}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/attach/", view(self.attach_view), name="connectors_inboundmessage_attach"),
            path("<path:object_id>/dismiss/", view(self.dismiss_view), name="connectors_inboundmessage_dismiss"),
        ] + super().get_urls()

    def _triage_target(self, request: HttpRequest, object_id: str) -> InboundMessage:
        message = self.object_or_404(request, object_id)
        if not self.may_triage(request):
            raise PermissionDenied
        return message

    def attach_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        message = self._triage_target(request, object_id)
        runs = scope_to_user(inbound_triage.candidate_runs(message), request.user)
        data = request.POST.copy() if request.method == "POST" else None
        if data is not None and data.get("_run"):
            data["run"] = data["_run"]  # a suggested run's button
        form = AttachForm(data)
        if form.is_valid():
            run = runs.filter(pk=form.cleaned_data["run"]).first()
            if run is None:
                form.add_error("run", "Not an open run of this message's organization: choose one listed here.")
            else:
                try:
                    inbound_triage.attach(message, run, by_user=request.user, note=form.cleaned_data["note"])
                except inbound_triage.TriageRefused as refused:
                    form.add_error(None, str(refused))
                else:
                    self.message_user(request, f"Attached the message to run {run.pk}: it is that run's inbound "
                                      "episode now.", messages.SUCCESS)
                    return HttpResponseRedirect(self.row_url(message, "change"))
        context = {**self.admin_site.each_context(request), "title": "Attach to a run", "message": message,
                   "form": form, "suggested": suggested_runs(runs, message), "opts": self.model._meta,
                   "original": message}
        return TemplateResponse(request, "admin/connectors/inboundmessage/attach.html", context)

    def dismiss_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        message = self._triage_target(request, object_id)
        response = self._ask_dismiss(request, [message])
        return response or HttpResponseRedirect(self.row_url(message, "change"))

    @admin.action(description="Dismiss the selected unmatched messages…", permissions=["dismiss"])
    def dismiss_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        return self._ask_dismiss(request, list(queryset), action="dismiss_selected")

    def _ask_dismiss(self, request: HttpRequest, rows: list[InboundMessage], *, action: str = ""):
        return ask_reason(self, request, rows, title="Dismiss unmatched messages: no run needs them", verb="Dismiss",
                          done="Dismissed", action=action,
                          act=lambda row, reason: inbound_triage.dismiss(row, by_user=request.user, note=reason))


def suggested_runs(runs: QuerySet[Run], message: InboundMessage) -> list[Run]:
    """Runs with a contact at the sender's address first, then the newest open runs."""
    sender = message.from_address
    matching = list(runs.filter(Q(contacts__email__iexact=sender) | Q(contacts__phone=sender) |
                                Q(contacts__slack_user=sender)).distinct()[:SUGGESTED_RUNS]) if sender else []
    newest = runs.exclude(pk__in=[run.pk for run in matching])[:SUGGESTED_RUNS - len(matching)]
    return matching + list(newest)


# --- Suppressions (the STOP list) ------------------------------------------------------------------------------


@admin.register(Suppression)
class SuppressionAdmin(OrganizationScopedAdmin, StudioObjectViews, ShownNotEdited):
    list_display = ["address", "channel", "reason", "organization", "created_at", "lift_button"]
    list_filter = ["reason", "channel", "organization"]
    list_select_related = ["organization"]
    search_fields = ["address"]
    date_hierarchy = "created_at"
    fields = ["organization", "channel", "address", "reason", "created_at"]
    actions = ["lift_selected"]
    change_form_template = "admin/connectors/suppression/change_form.html"

    def has_lift_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("connectors.lift_suppression")

    def get_list_display(self, request: HttpRequest) -> list:
        return self.list_display if self.has_lift_permission(request) else self.list_display[:-1]

    @admin.display(description="")
    def lift_button(self, suppression: Suppression) -> str:
        return format_html('<a class="button" href="{}" data-lift="{}">Lift…</a>', self.row_url(suppression, "lift"),
                           suppression.pk)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        extra_context = {**(extra_context or {}), "may_lift": self.has_lift_permission(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        return [path("<path:object_id>/lift/", self.admin_site.admin_view(self.lift_view),
                     name="connectors_suppression_lift")] + super().get_urls()

    def lift_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        suppression = self.object_or_404(request, object_id)
        if not self.has_lift_permission(request):
            raise PermissionDenied
        response = self._ask(request, [suppression])
        return response or HttpResponseRedirect(self.changelist_url())

    @admin.action(description="Lift the selected suppressions…", permissions=["lift"])
    def lift_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        return self._ask(request, list(queryset), action="lift_selected")

    def _ask(self, request: HttpRequest, rows: list[Suppression], *, action: str = "") -> HttpResponse | None:
        return ask_reason(self, request, rows, title="Lift suppressions: these addresses may be contacted again",
                          verb="Lift", done="Lifted", action=action,
                          act=lambda row, reason: suppressions.lift(row, by_user=request.user, note=reason))


@admin.register(SuppressionLift)
class SuppressionLiftAdmin(OrganizationScopedAdmin, ShownNotEdited):
    list_display = ["lifted_at", "address", "channel", "reason", "organization", "lifted_by_name", "note"]
    list_filter = ["channel", "reason", "organization"]
    list_select_related = ["organization", "lifted_by"]
    search_fields = ["address", "note"]
    date_hierarchy = "lifted_at"
    fields = ["organization", "channel", "address", "reason", "suppressed_at", "lifted_by", "lifted_at", "note"]

    @admin.display(description="lifted by", ordering="lifted_by__username")
    def lifted_by_name(self, lift: SuppressionLift) -> str:
        return str(lift.lifted_by) if lift.lifted_by else "the contact (START)"


# --- Delivery events -------------------------------------------------------------------------------------------


@admin.register(DeliveryEvent)
class DeliveryEventAdmin(ShownNotEdited):
    """Provider tracking events. An event has no organization of its own: it is the organization's whose send
    (outbox row) it names, by idempotency key or provider message id."""

    list_display = ["at", "channel", "event_type", "provider_message_id", "run_link"]
    list_filter = ["event_type", "channel"]
    search_fields = ["=provider_message_id", "=idem_key"]
    date_hierarchy = "at"
    fields = ["at", "channel", "event_type", "provider_message_id", "idem_key", "provider_event_id", "run_link",
              "raw"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        send = OutboxMessage.objects.filter(idem_key=OuterRef("idem_key")).exclude(idem_key="")
        events = super().get_queryset(request).annotate(run_id=Subquery(send.values("run_id")[:1]))
        if request.user.is_active and request.user.is_superuser:
            return events
        sends = scope_to_user(OutboxMessage.objects.all(), request.user, "run__organization")
        return events.filter(
            Q(idem_key__in=sends.exclude(idem_key="").values("idem_key"))
            | Q(provider_message_id__in=sends.exclude(provider_message_id="").values("provider_message_id")))

    @admin.display(description="run")
    def run_link(self, event: DeliveryEvent) -> str:
        if event.run_id is None:
            return "-"
        return format_html('<a href="{}">run {}</a>', reverse("admin:runs_run_timeline", args=[event.run_id]),
                           event.run_id)
