"""A button clicked on an escalation notice in Slack (runs.notifications): the escalation is answered.

The click arrives verified (lucia_site.webhooks: the Slack identity's signing
secret, fresh, never replayed) and names the organization by its workspace.
The answer goes through runs.answers like the Studio's and the API's, with
the clicking Slack user as who acted. Options that need words or data (a
reply, a guide, an address, a channel) are not acted on: the person gets
the Studio's link.
Whatever happens, the person is told in one line; nothing here raises for
a refused answer.
"""

from __future__ import annotations

from agents.models import Organization
from runs import answers, escalations, notifications
from runs.models import Escalation

VIA_MAX = 32


def answer_click(organization: Organization, *, value: str, slack_user: str) -> str:
    """Answer the escalation a button's value ("<escalation id>:<option name>") names; the line to show the
    person who clicked."""
    escalation_id, _, name = value.partition(":")
    escalation = None
    if escalation_id.isascii() and escalation_id.isdigit():
        escalation = Escalation.objects.filter(pk=int(escalation_id), organization=organization).first()
    if escalation is None:
        return "This button does not name an escalation of your organization."
    option = next((option for option in notifications.options_of(escalation) if option["name"] == name), None)
    if option is None:
        return f"“{name}” is not an answer escalation #{escalation.pk} offers."
    if option["in_studio"]:
        return (f"“{option['label']}” needs your words: answer escalation #{escalation.pk} in the Studio: "
                f"{notifications.studio_url(escalation.pk)}")
    try:
        # No data: an option's `data` describes what the Studio form asks for; a click gives none of it.
        answers.answer(escalation, option=name, via=f"slack:{slack_user}"[:VIA_MAX])
    except answers.AnswerRefused as refused:
        return f"Escalation #{escalation.pk} was not answered: {refused.message}"
    except escalations.EscalationClosed:
        return f"Escalation #{escalation.pk} was already answered."
    return f"Escalation #{escalation.pk} answered: {option['label']}."
