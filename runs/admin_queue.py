"""The escalation review queue in the Studio: the list (open first, then oldest, SLA, assignee, filters, bulk
actions) and each escalation's page (context, the run's recent messages, claim, and its typed options as
buttons). Reading needs runs.view_escalation, acting runs.change_escalation; every row is scoped to the
user's organizations (agents.staff). Answers go through runs.answers, claims through runs.escalations.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import admin, messages
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from agents.staff import OrganizationScopedAdmin
from runs import answer_options, answers, cancellation, clock, escalations, events, review_queue
from runs.admin_queue_filters import QUEUE_FILTERS
from runs.admin_queue_page import AnswerForm, answer_cards, confirm_first_preview, context_items, preview_fields
from runs.answer_options import AnswerRefused
from runs.models import Escalation, EscalationStatus


@admin.register(Escalation)
class EscalationAdmin(OrganizationScopedAdmin, admin.ModelAdmin):
    """The review queue: open first, then oldest; answer, claim or resolve from each escalation's page."""

    list_display = ["id", "age", "sla", "kind", "organization", "run_link", "short_prompt", "assignee_name", "status"]
    list_display_links = ["id", "short_prompt"]
    list_filter = QUEUE_FILTERS
    search_fields = ["=id", "=run__id", "prompt"]
    list_select_related = ["organization", "run", "assignee"]
    list_per_page = 50
    actions = ["claim_selected", "unassign_selected", "dismiss_selected", "stop_selected_runs"]
    review_template = "admin/runs/escalation/review.html"

    class Media:
        css = {"all": ["lucia/review_queue.css"]}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the runtime opens escalations

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # answered or cancelled, never deleted: they are the run's history

    def get_queryset(self, request: HttpRequest):
        return review_queue.with_sla(super().get_queryset(request))

    def get_ordering(self, request: HttpRequest) -> list:
        return review_queue.queue_order()

    def changelist_view(self, request: HttpRequest, extra_context=None):
        return super().changelist_view(request, {"title": "Review queue: escalations", **(extra_context or {})})

    # The list's columns --------------------------------------------------------------------------------------

    @admin.display(description="age", ordering="created_at")
    def age(self, escalation: Escalation) -> str:
        return duration(clock.wall_now() - escalation.created_at)

    @admin.display(description="SLA", ordering="sla_due_at")
    def sla(self, escalation: Escalation) -> str:
        if escalation.status != EscalationStatus.OPEN:
            return "—"
        left = review_queue.sla_due_at(escalation) - clock.wall_now()
        if left < timedelta(0):
            return format_html('<span class="sla-breached" data-sla="breached">breached {} ago</span>',
                               duration(-left))
        return format_html('<span class="sla-ok" data-sla="within">due in {}</span>', duration(left))

    @admin.display(description="run", ordering="run_id")
    def run_link(self, escalation: Escalation) -> str:
        if escalation.run_id is None:
            return "—"
        return format_html('<a href="{}">{}</a>', reverse("admin:runs_run_change", args=[escalation.run_id]),
                           f"run {escalation.run_id}")

    @admin.display(description="prompt")
    def short_prompt(self, escalation: Escalation) -> str:
        return escalation.prompt[:80]

    @admin.display(description="assignee", ordering="assignee__username")
    def assignee_name(self, escalation: Escalation) -> str:
        return escalation.assignee.get_username() if escalation.assignee else "—"

    # Bulk actions: each escalation through the one writer, one summary message ------------------------------

    @admin.action(description="Claim the selected (assign to me)", permissions=["change"])
    def claim_selected(self, request: HttpRequest, queryset) -> None:
        claimed, refused = 0, []
        for escalation in queryset:
            try:
                escalations.claim(escalation, user=request.user)
                claimed += 1
            except escalations.ClaimRefused as error:
                refused.append(str(error))
        if refused:
            self.message_user(request, f"Claimed {claimed}. Not claimed: {'; '.join(refused)}.", messages.WARNING)
        else:
            self.message_user(request, f"Claimed {claimed}.", messages.SUCCESS)

    @admin.action(description="Unassign the selected", permissions=["change"])
    def unassign_selected(self, request: HttpRequest, queryset) -> None:
        for escalation in queryset:
            escalations.unassign(escalation)
        self.message_user(request, f"Unassigned {queryset.count()}; anyone can claim them now.", messages.SUCCESS)

    @admin.action(description="Dismiss the selected (unmatched inbound, provider outages)", permissions=["change"])
    def dismiss_selected(self, request: HttpRequest, queryset) -> None:
        self._answer_many(request, queryset, option="dismiss")

    @admin.action(description="Stop the runs of the selected", permissions=["change"])
    def stop_selected_runs(self, request: HttpRequest, queryset) -> None:
        self._answer_many(request, queryset, option="stop_run")

    def _answer_many(self, request: HttpRequest, queryset, *, option: str) -> None:
        tally = review_queue.answer_many(queryset, option=option, by_user=request.user)
        level = messages.SUCCESS if tally.done and len(tally.done) == queryset.count() else messages.WARNING
        self.message_user(request, tally.summary(), level)

    # The escalation's page -----------------------------------------------------------------------------------

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        escalation = self.get_object(request, unquote(object_id))
        if escalation is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_or_change_permission(request, escalation):
            raise PermissionDenied
        posted, preview = None, None
        if request.method == "POST":
            if not self.has_change_permission(request, escalation):
                raise PermissionDenied
            response, posted, preview = self._act(request, escalation)
            if response is not None:
                return response
            escalation = self.get_object(request, unquote(object_id))
        return self._render(request, escalation, posted=posted, preview=preview)

    def _act(self, request: HttpRequest, escalation: Escalation):
        """(a redirect once something was done, or None; the option posted; a preview to confirm)."""
        if "_claim" in request.POST or "_unassign" in request.POST:
            return self._assign(request, escalation), None, None
        option = request.POST.get("_option", "")
        form = AnswerForm(request.POST)
        form.is_valid()  # every field is optional; the option's own checks say what is missing
        text, data = form.cleaned_data.get("text", "").strip(), form.answer_data()
        try:
            preview = confirm_first_preview(escalation, option=option, text=text, data=data)
            if preview is not None:
                self.message_user(request, "Nothing is sent yet: check the preview, then confirm.", messages.WARNING)
                return None, option, preview
            answers.answer(escalation, option=option, text=text, data=data, by_user=request.user, via="admin")
        except AnswerRefused as refused:
            self.message_user(request, refused.message, messages.ERROR)
            return None, option, None
        except (escalations.EscalationClosed, cancellation.RunNotOpen, events.RunEnded) as error:
            self.message_user(request, f"{error}. Nothing was done.", messages.ERROR)
            return None, option, None
        self.message_user(request, done_message(escalation, option), messages.SUCCESS)
        return self._back_to_queue(request), None, None

    def _assign(self, request: HttpRequest, escalation: Escalation) -> HttpResponseRedirect:
        if "_unassign" in request.POST:
            escalations.unassign(escalation)
            self.message_user(request, f"Escalation #{escalation.pk} is unassigned; anyone can claim it.",
                              messages.SUCCESS)
        else:
            try:
                escalations.claim(escalation, user=request.user)
                self.message_user(request, f"Escalation #{escalation.pk} is yours.", messages.SUCCESS)
            except escalations.ClaimRefused as refused:
                self.message_user(request, str(refused), messages.ERROR)
        return HttpResponseRedirect(request.get_full_path())

    def _back_to_queue(self, request: HttpRequest) -> HttpResponseRedirect:
        url = reverse("admin:runs_escalation_changelist")
        preserved = self.get_preserved_filters(request)
        if preserved:
            return HttpResponseRedirect(add_preserved_filters({"preserved_filters": preserved, "opts": self.opts}, url))
        return HttpResponseRedirect(url + "?status=open")

    def _render(self, request: HttpRequest, escalation: Escalation, *, posted: str | None,
                preview: dict | None) -> HttpResponse:
        can_change = self.has_change_permission(request, escalation)
        run = escalation.run
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": f"{escalation.get_kind_display()} #{escalation.pk}",
            "escalation": escalation, "run": run, "media": self.media,
            "is_open": escalation.status == EscalationStatus.OPEN,
            "can_change": can_change,
            "can_view_run": request.user.has_perm("runs.view_run"),
            "age": duration(clock.wall_now() - escalation.created_at),
            "sla_due_at": review_queue.sla_due_at(escalation),
            "sla_breached": review_queue.is_breached(escalation),
            "context_items": context_items(escalation),
            "send_in_doubt": review_queue.send_in_doubt(escalation),
            "recent_messages": review_queue.recent_messages(run) if run is not None else [],
            "cards": answer_cards(escalation, posted=posted, values=request.POST) if can_change else [],
            "preview": preview, "preview_fields": preview_fields(request.POST) if preview else [],
        }
        return TemplateResponse(request, self.review_template, context)


def done_message(escalation: Escalation, option: str) -> str:
    closed = Escalation.objects.select_related("run").get(pk=escalation.pk)
    label = answer_options.get(option).label
    where = f"; the run is {closed.run.get_status_display().lower()}" if closed.run is not None else ""
    return f"Escalation #{closed.pk}: “{label}” done ({closed.get_status_display().lower()}{where})."


def duration(span: timedelta) -> str:
    """A span as a person reads it in a queue: 2d 3h, 4h 05m, 12m."""
    minutes = max(int(span.total_seconds() // 60), 0)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m"
