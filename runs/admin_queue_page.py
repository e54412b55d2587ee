"""What an escalation's review page offers: one card per fitting option with the inputs it takes, the
preview a customer-facing answer shows before it is confirmed, and the escalation's context as rows.

The option registry (runs.answer_options) decides which options fit and what data each takes; this
module only turns that into inputs, so an option registered elsewhere gets its card too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from django import forms
from django.http import QueryDict

from runs import answer_options, answers, approvals
from runs.answer_options import AnswerRefused
from runs.models import Contact, Escalation, OutboxMessage, Task, TaskStatus

CHANNELS = [("email", "email"), ("sms", "SMS"), ("voice", "voice"), ("slack", "Slack")]
REPLY_CHANNELS = [choice for choice in CHANNELS if choice[0] in answers.CHANNEL_TOOL]
DATA_FIELDS = ("role", "channel", "address", "task_key", "subject")
# Options whose answer reaches a contact: the Studio shows what goes out and asks once more first.
CONFIRM_FIRST = ("reply_to_contact", "edit", "not_sent")
TEXT_LABELS = {
    "guide_agent": "Guidance for the agent (it reads it; never sent to the contact)",
    "reply_to_contact": "Your reply, sent to the contact exactly as written",
    "edit": "The message as it should go out",
    "reject": "Guidance for the agent (never sent)",
    "stop_run": "Reason (optional)",
    "resume": "Answer (optional)",
    "mark_done": "Evidence: how you know it is done (optional)",
}
CONFIRM_BUTTONS = {"not_sent": "Confirm and send it again"}
# Context keys the page shows in their own panel, by kind (the draft, the send in doubt, the blocked message).
PANELLED = {
    "approval": {"draft", "outbox_message_id"},
    "uncertain_send": {"provider_lookup", "outbox_message_id", "payload", "tool"},
    "guardrail_block": {"payload", "recipient", "tool"},
}


class AnswerForm(forms.Form):
    """The text and data a posted option may carry; the pressed button names the option."""

    text = forms.CharField(required=False, strip=True)
    role = forms.CharField(required=False)
    channel = forms.ChoiceField(required=False, choices=[("", "—"), *CHANNELS])
    channels = forms.MultipleChoiceField(required=False, choices=CHANNELS)
    address = forms.CharField(required=False)
    task_key = forms.CharField(required=False)
    subject = forms.CharField(required=False)
    confirm = forms.BooleanField(required=False)

    def answer_data(self) -> dict:
        cleaned = getattr(self, "cleaned_data", {})
        data = {name: value for name in DATA_FIELDS if (value := cleaned.get(name))}
        if cleaned.get("channels"):
            data["channels"] = list(cleaned["channels"])
        if cleaned.get("confirm"):
            data["confirm"] = True
        return data


@dataclass
class Input:
    name: str
    label: str
    widget: str  # textarea | text | select | checkboxes
    choices: list[tuple[str, str]] = field(default_factory=list)
    required: bool = False
    help: str = ""
    value: str | list[str] = ""


@dataclass
class Card:
    name: str
    label: str
    description: str
    inputs: list[Input]
    confirm_first: bool


def answer_cards(escalation: Escalation, *, posted: str | None, values: QueryDict) -> list[Card]:
    """One card per option that fits now; the posted option's card keeps what was typed."""
    roles = list(Contact.objects.filter(run_id=escalation.run_id).values_list("role", flat=True)) \
        if escalation.run_id else []
    tasks = list(Task.objects.filter(run_id=escalation.run_id, status=TaskStatus.OPEN).values_list("key", "title")) \
        if escalation.run_id else []
    if (escalation.context or {}).get("task_key"):
        tasks = [("", "the task the escalation is about"), *tasks]
    cards = []
    for option in answer_options.fitting(escalation):
        inputs = _inputs(option, roles=roles, tasks=tasks)
        if option.name == posted:
            for one in inputs:
                one.value = values.getlist(one.name) if one.widget == "checkboxes" else values.get(one.name, "")
        cards.append(Card(name=option.name, label=option.label, description=option.description, inputs=inputs,
                          confirm_first=option.name in CONFIRM_FIRST))
    return cards


def _inputs(option: answer_options.Option, *, roles: list[str], tasks: list[tuple[str, str]]) -> list[Input]:
    text_label = TEXT_LABELS.get(option.name, "Text (required)" if option.needs_text else "Note (optional)")
    text = Input("text", text_label, "textarea" if option.needs_text else "text", required=option.needs_text)
    inputs = [text] if option.needs_text else []
    for name, hint in option.data.items():
        if name == "role" and len(roles) > 1:
            inputs.append(Input("role", "Contact", "select", [("", "the one the escalation is about"),
                                                              *[(role, role) for role in roles]], help=hint))
        elif name == "channel":
            choices = REPLY_CHANNELS if option.name == "reply_to_contact" else CHANNELS
            default = [("", "default")] if "default" in hint else []
            inputs.append(Input("channel", "Channel", "select", [*default, *choices], help=hint))
        elif name == "channels":
            inputs.append(Input("channels", "Channels", "checkboxes", CHANNELS, help=hint))
        elif name == "task_key" and len(tasks) > 1:
            inputs.append(Input("task_key", "Task", "select",
                                [(key, f"{title} ({key})" if key else title) for key, title in tasks], help=hint))
        elif name in ("address", "subject"):
            inputs.append(Input(name, name.capitalize(), "text", required="required" in hint, help=hint))
    # Words that are the answer come first; an optional note after what the option needs.
    return inputs if option.needs_text else [*inputs, text]


def require_text(escalation: Escalation, *, option: str, text: str) -> None:
    """Refuse an empty answer to an option that needs words, before anything else is checked."""
    if not option:
        fitting = ", ".join(fit.label for fit in answer_options.fitting(escalation))
        raise AnswerRefused(f"Choose an option: press one of the buttons ({fitting or 'none fits'}).")
    chosen = answer_options.get(option)
    if chosen is not None and chosen.needs_text and not text:
        raise AnswerRefused(f"“{chosen.label}” needs text: {TEXT_LABELS.get(option, chosen.description)}. "
                            "Write it in the box, then press the button again; nothing was done.")


def confirm_first_preview(escalation: Escalation, *, option: str, text: str, data: dict) -> dict | None:
    """What an unconfirmed customer-facing answer would send ({"to", "channel", "payload"}), or None when the
    answer may go ahead. Raises AnswerRefused for an empty answer or one the preview cannot be built for."""
    require_text(escalation, option=option, text=text)
    if option not in CONFIRM_FIRST or data.get("confirm") is True:
        return None
    if option not in {fit.name for fit in answer_options.fitting(escalation)}:
        return None  # answers.answer names the options that fit
    if option == "reply_to_contact":
        preview = answers.reply_preview(escalation, text, data)
    elif option == "edit":
        preview = approvals.edit_preview(escalation, text, data)
    else:
        message = OutboxMessage.objects.get(pk=escalation.outbox_message_id)
        preview = {"tool": message.tool, "channel": message.channel, "to": message.recipient,
                   "payload": message.payload, "resend": True}
    return {**preview, "option": option, "button": CONFIRM_BUTTONS.get(option, "Confirm and send")}


def preview_fields(values: QueryDict) -> list[tuple[str, str]]:
    """The posted answer's fields, carried as hidden inputs by the confirmation form."""
    return [(name, value) for name in ("text", *DATA_FIELDS, "channels") for value in values.getlist(name)]


def context_items(escalation: Escalation) -> list[tuple[str, str, bool]]:
    """The escalation's context as (key, shown value, shown as a block) rows, panelled keys left out."""
    rows, panelled = [], PANELLED.get(escalation.kind, set())
    for key, value in (escalation.context or {}).items():
        if key in panelled:
            continue
        if isinstance(value, dict | list):
            rows.append((key.replace("_", " "), json.dumps(value, indent=2, ensure_ascii=False, default=str), True))
        else:
            rows.append((key.replace("_", " "), str(value), "\n" in str(value)))
    return rows

