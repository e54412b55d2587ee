"""The run page's operations: retry a failed episode, wake now, reschedule the next contact, post an event,
cancel with a reason. Each view checks `runs.change_run`, reaches the run through the admin's scoped
queryset (another organization's run is a 404), makes one domain call and reports with one message."""

from __future__ import annotations

import uuid
import zoneinfo

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from runs import cancellation, escalations, events, retries, submissions, wakes
from runs.models import Episode, Run


class RescheduleForm(forms.Form):
    at = forms.DateTimeField(input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S"],
                             widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
                             help_text="In the organization's timezone.")


class EventForm(forms.Form):
    kind = forms.ChoiceField(choices=[("event", "event (anything else)"), ("inbound", "inbound (a contact's message)")])
    sender = forms.CharField(required=False, help_text="A run contact's email, phone or Slack id (inbound needs one).")
    channel = forms.ChoiceField(required=False, choices=[("", "—"), ("email", "email"), ("sms", "SMS"),
                                                         ("voice", "voice"), ("slack", "Slack")])
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))


class CancelForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), strip=True,
                             help_text="Recorded as the run's outcome.")


class RunOperations:
    """Mixed into RunAdmin: URLs and views of the operations."""

    def operation_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path("<int:run_id>/wake/", view(require_POST(self.wake_view)), name="runs_run_wake"),
            path("<int:run_id>/reschedule/", view(require_POST(self.reschedule_view)), name="runs_run_reschedule"),
            path("<int:run_id>/event/", view(require_POST(self.event_view)), name="runs_run_event"),
            path("<int:run_id>/cancel/", view(self.cancel_view), name="runs_run_cancel"),
            path("<int:run_id>/retry/<int:episode_id>/", view(require_POST(self.retry_view)), name="runs_run_retry"),
        ]

    def may_operate(self, request: HttpRequest) -> bool:
        return request.user.has_perm("runs.change_run")

    def operable_run(self, request: HttpRequest, run_id: int) -> Run:
        """The run, if the user may operate it: 403 without runs.change_run, 404 outside their organizations."""
        if not self.may_operate(request):
            raise PermissionDenied
        run = self.get_queryset(request).filter(pk=run_id).first()
        if run is None:
            raise Http404(f"No run {run_id} in your organizations.")
        return run

    def wake_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        run = self.operable_run(request, run_id)
        try:
            episode = wakes.wake_now(run, by_user=request.user)
        except (wakes.CannotMove, events.RunEnded) as refused:
            return self._back(request, run, str(refused), messages.ERROR)
        return self._back(request, run, f"Run {run.pk}: episode #{episode.seq} is due now; a worker picks it up "
                                        "on the next dispatch.", messages.SUCCESS)

    def reschedule_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        run = self.operable_run(request, run_id)
        form = RescheduleForm(request.POST)
        if not form.is_valid():
            return self._back(request, run, "Give the new time as YYYY-MM-DD HH:MM.", messages.ERROR)
        zone = zoneinfo.ZoneInfo(run.organization.default_timezone)
        at = timezone.make_aware(form.cleaned_data["at"].replace(tzinfo=None), zone)
        try:
            episode = wakes.reschedule_next_contact(run, at=at, by_user=request.user)
        except (wakes.CannotMove, events.RunEnded) as refused:
            return self._back(request, run, str(refused), messages.ERROR)
        return self._back(request, run, f"Run {run.pk}: the next contact (episode #{episode.seq}) is now due "
                                        f"{at:%Y-%m-%d %H:%M %Z}.", messages.SUCCESS)

    def event_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        run = self.operable_run(request, run_id)
        form = EventForm(request.POST)
        if not form.is_valid():
            return self._back(request, run, "An event needs a kind and its text.", messages.ERROR)
        data = form.cleaned_data
        try:
            episode = submissions.record(
                run, kind=data["kind"], dedupe_key=f"studio:{uuid.uuid4()}", sender=data["sender"],
                channel=data["channel"], text=data["text"], extra={"posted_by": request.user.pk, "via": "admin"})
        except submissions.Refused as refused:
            return self._back(request, run, f"{refused.field}: {refused.message}", messages.ERROR)
        except events.RunEnded as refused:
            return self._back(request, run, f"{refused}; it takes no more events.", messages.ERROR)
        return self._back(request, run, f"Run {run.pk}: event recorded as episode #{episode.seq}.", messages.SUCCESS)

    def retry_view(self, request: HttpRequest, run_id: int, episode_id: int) -> HttpResponse:
        run = self.operable_run(request, run_id)
        episode = Episode.objects.filter(pk=episode_id, run=run).first()
        if episode is None:
            raise Http404(f"Run {run.pk} has no episode {episode_id}.")
        try:
            again = retries.retry_episode(episode, by_user=request.user)
        except (retries.NotRetryable, events.RunEnded, escalations.EscalationClosed) as refused:
            return self._back(request, run, str(refused), messages.ERROR)
        return self._back(request, run, f"Run {run.pk}: episode #{episode.seq} runs again as #{again.seq}.",
                          messages.SUCCESS)

    def cancel_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        run = self.operable_run(request, run_id)
        form = CancelForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            return self.cancel_with_reason(request, [run], reason=form.cleaned_data["reason"])
        return self.cancel_confirmation(request, [run], form)

    def cancel_confirmation(self, request: HttpRequest, runs: list[Run], form: CancelForm) -> TemplateResponse:
        """The page that asks for the reason before anything is cancelled (one run, or the list's selection)."""
        context = {**self.admin_site.each_context(request), "opts": Run._meta, "runs": runs, "form": form,
                   "title": f"Cancel {len(runs)} run{'s' if len(runs) != 1 else ''}?",
                   "action_checkbox_name": "_selected_action"}
        return TemplateResponse(request, "admin/runs/run/cancel_confirmation.html", context)

    def cancel_with_reason(self, request: HttpRequest, runs: list[Run], *, reason: str) -> HttpResponse:
        cancelled, refused = [], []
        for run in runs:
            try:
                cancellation.cancel_run(run, reason=reason, by_user=request.user)
                cancelled.append(str(run.pk))
            except cancellation.RunNotOpen as error:
                refused.append(str(error))
        if cancelled:
            self.message_user(request, f"Cancelled run{'s' if len(cancelled) > 1 else ''} {', '.join(cancelled)}: "
                                       f"{reason}", messages.SUCCESS)
        if refused:
            self.message_user(request, f"Not cancelled: {'; '.join(refused)}.", messages.WARNING)
        target = (reverse("admin:runs_run_change", args=[runs[0].pk]) if len(runs) == 1
                  else reverse("admin:runs_run_changelist"))
        return HttpResponseRedirect(target)

    def _back(self, request: HttpRequest, run: Run, message: str, level: int) -> HttpResponseRedirect:
        self.message_user(request, message, level)
        return HttpResponseRedirect(reverse("admin:runs_run_change", args=[run.pk]))
