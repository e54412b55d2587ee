"""Button clicks on escalation notices: /hooks/slack/interactions/, signed like every Slack webhook.

A click answers through the real runs.answers (`answers_stand_in` only records the calls); the option named
"refused" fits no escalation, so runs.answers refuses it.
"""

import json
import time
import types
from urllib.parse import urlencode

import pytest
from slack_sdk.signature import SignatureVerifier

from runs import answers
from runs.models import Escalation
from tests.connectors.conftest import BOT_TOKEN, SIGNING_SECRET
from tests.factories import EscalationFactory, OrganizationFactory
from tests.lucia_site.webhooks.support import identity, run_with_contact

pytestmark = pytest.mark.django_db

# As runs.answers stores them: `data` describes what the Studio form asks for, it holds no values.
OPTIONS = [{"name": "stop_run", "label": "Stop the run", "data": {}},
           {"name": "guide_agent", "label": "Guide the agent", "data": {}, "needs_text": True},
           {"name": "stop_contacting", "label": "Stop contacting them",
            "data": {"role": "the contact's role", "channels": "list of email, sms, voice, slack (empty: all)"}},
           {"name": "refused", "label": "Refused by the rules", "data": {}}]


@pytest.fixture
def answers_stand_in(monkeypatch):
    """The real runs.answers, with its calls recorded (`.calls`): what the click handler asked of it."""
    calls = []
    real = answers.answer

    def answer(escalation, *, option, text="", data=None, by_user=None, by_key=None, via):
        calls.append({"escalation": escalation.pk, "option": option, "data": data, "via": via})
        return real(escalation, option=option, text=text, data=data, by_user=by_user, by_key=by_key, via=via)

    monkeypatch.setattr(answers, "answer", answer)
    return types.SimpleNamespace(calls=calls)


@pytest.fixture
def acme(slack_server):
    organization = OrganizationFactory(name="Acme")
    identity(organization, "slack", "T0ACME", bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET,
             api_base_url=slack_server.base_url)
    return organization


def _click(escalation_id: int, option: str, *, response_url: str = "", team: str = "T0ACME") -> dict:
    return {
        "type": "block_actions", "team": {"id": team, "domain": "acme"},
        "user": {"id": "U0OPS", "username": "dana"}, "response_url": response_url,
        "actions": [{"type": "button", "action_id": f"lucia_answer:{option}", "value": f"{escalation_id}:{option}",
                     "block_id": f"lucia_escalation_{escalation_id}", "action_ts": "1718000000.000100"}],
    }


def _post(client, payload: dict | None, *, secret: str = SIGNING_SECRET, timestamp: int | None = None,
          body: bytes | None = None):
    body = body if body is not None else urlencode({"payload": json.dumps(payload)}).encode()
    stamp = str(timestamp or int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    return client.post("/hooks/slack/interactions/", data=body, content_type="application/x-www-form-urlencoded",
                       HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp, HTTP_X_SLACK_SIGNATURE=signature)


def _escalation(organization) -> Escalation:
    return EscalationFactory(run=run_with_contact(organization, email="dana@vendor.test"), options=OPTIONS)


def test_a_signed_click_answers_the_escalation_as_the_slack_user_and_tells_them_only(
        client, acme, slack_server, answers_stand_in, django_capture_on_commit_callbacks):
    escalation = _escalation(acme)
    response_url = f"{slack_server.url}/actions/T0ACME/1/abc"

    with django_capture_on_commit_callbacks(execute=True):
        response = _post(client, _click(escalation.pk, "stop_run", response_url=response_url))

    assert response.status_code == 200
    assert response.json()["response_type"] == "ephemeral" and "Stop the run" in response.json()["text"]
    escalation.refresh_from_db()
    assert (escalation.status, escalation.answered_via) == ("answered", "slack:U0OPS")
    assert [call["data"] for call in answers_stand_in.calls] == [None]
    [reply] = slack_server.calls_to("/actions/T0ACME/1/abc")
    assert reply.json()["response_type"] == "ephemeral" and f"#{escalation.pk}" in reply.json()["text"]


def test_an_option_whose_data_describes_the_studio_form_is_answered_without_that_description(
        client, acme, answers_stand_in):
    escalation = _escalation(acme)

    response = _post(client, _click(escalation.pk, "stop_contacting"))

    assert response.status_code == 200 and "Stop contacting them" in response.json()["text"]
    assert answers_stand_in.calls[0]["data"] is None
    assert Escalation.objects.get(pk=escalation.pk).status == "answered"


def test_a_refused_answer_is_shown_to_the_clicker_and_changes_nothing(client, acme, answers_stand_in):
    escalation = _escalation(acme)

    response = _post(client, _click(escalation.pk, "refused"))

    assert response.status_code == 200 and "does not fit" in response.json()["text"]
    assert Escalation.objects.get(pk=escalation.pk).status == "open"


def test_an_option_needing_words_answers_with_a_link_to_the_studio(client, acme, answers_stand_in):
    escalation = _escalation(acme)

    response = _post(client, _click(escalation.pk, "guide_agent"))

    assert response.status_code == 200
    assert f"/runs/escalation/{escalation.pk}/change/" in response.json()["text"]
    assert answers_stand_in.calls == [] and Escalation.objects.get(pk=escalation.pk).status == "open"


def test_a_click_on_another_organizations_escalation_answers_nothing(client, acme, answers_stand_in):
    theirs = _escalation(OrganizationFactory())

    response = _post(client, _click(theirs.pk, "stop_run"))

    assert response.status_code == 200 and "does not name an escalation" in response.json()["text"]
    assert answers_stand_in.calls == [] and Escalation.objects.get(pk=theirs.pk).status == "open"


def test_forged_stale_and_replayed_clicks_are_refused_and_change_nothing(client, acme, answers_stand_in):
    escalation = _escalation(acme)
    click = _click(escalation.pk, "stop_run")

    forged = _post(client, click, secret="not-the-secret")
    stale = _post(client, click, timestamp=int(time.time()) - 3600)
    unknown_team = _post(client, _click(escalation.pk, "stop_run", team="T0OTHER"))
    assert (forged.status_code, stale.status_code, unknown_team.status_code) == (403, 403, 403)
    assert answers_stand_in.calls == [] and Escalation.objects.get(pk=escalation.pk).status == "open"

    stamp = int(time.time())
    first = _post(client, click, timestamp=stamp)
    replayed = _post(client, click, timestamp=stamp)
    assert (first.status_code, replayed.status_code) == (200, 403)
    assert len(answers_stand_in.calls) == 1


def test_the_studio_link_button_is_acknowledged_and_acts_on_nothing(client, acme, answers_stand_in):
    escalation = _escalation(acme)
    click = _click(escalation.pk, "stop_run")
    click["actions"] = [{"type": "button", "action_id": "lucia_open_studio", "url": "https://lucia.example.com/"}]

    response = _post(client, click)

    assert response.status_code == 200 and answers_stand_in.calls == []
    assert Escalation.objects.get(pk=escalation.pk).status == "open"


def test_a_signed_body_that_is_no_click_is_a_400(client, acme, answers_stand_in):
    not_a_form = _post(client, None, body=b"payload=%7Bnot json")
    no_action = _post(client, {"type": "block_actions", "team": {"id": "T0ACME"}, "actions": []})
    a_nul = _post(client, _click(1, "stop\u0000run"))

    assert (not_a_form.status_code, no_action.status_code, a_nul.status_code) == (400, 400, 400)
    assert answers_stand_in.calls == []
