"""Webhook endpoints, one class per provider route on the pipeline in lucia_site.webhooks.pipeline.

Thin on purpose: each says whose secrets may have signed the request and hands
verified items to intake. The work behind a good request is database writes
only (the run advances later on a worker), so providers get their answer at
once — Slack wants it within 3 s.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape

from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.http.multipartparser import MultiPartParserError

from connectors import registry, slack
from connectors.base import ParsedInbound
from connectors.models import Channel, Identity
from lucia_site import untrusted_input
from lucia_site.webhooks import intake, recipients
from lucia_site.webhooks.pipeline import Refused, Verified, WebhookView, first_verified
from runs import notice_clicks

TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response>{}</Response>'


class MailgunInbound(WebhookView):
    """Mail Mailgun received and forwarded (a route's forward-to-url). The run (and so the organization) is
    named by our reply token or Message-ID; the exact mailbox's owner only takes what nothing names."""

    provider = "mailgun"
    signs_time = True

    def verify(self, request: HttpRequest) -> Verified:
        signers = recipients.mailgun_signers(_form_value(request, "recipient"))
        return first_verified(request, [(c, i.organization if i else None) for c, i in signers])

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        for item in items:
            owner = verified.organization
            if owner is None:
                mailbox = recipients.for_email(item.to_address)
                owner = mailbox.organization if mailbox else None
            intake.receive_message(item, channel=Channel.EMAIL, organization=owner)
        return HttpResponse(status=200)


class MailgunTracking(WebhookView):
    """Delivery events of our sends; each belongs to the organization of the send its key names."""

    provider = "mailgun"
    signs_time = True

    def verify(self, request: HttpRequest) -> Verified:
        envelope = (_json(request) or {}).get("event-data") or {}
        sender = (envelope.get("envelope") or {}).get("sender") if isinstance(envelope, dict) else None
        signers = recipients.mailgun_signers(sender if isinstance(sender, str) else "")
        return first_verified(request, [(c, i.organization if i else None) for c, i in signers])

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        for item in items:
            intake.receive_status(item, channel=Channel.EMAIL, organization=verified.organization)
        return HttpResponse(status=200)


class TwilioSms(WebhookView):
    provider = "twilio"

    def verify(self, request: HttpRequest) -> Verified:
        return _twilio_signer(request, _form(request).get("To", ""), channel=Channel.SMS)

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        return _twiml(intake.receive(items, channel=Channel.SMS, organization=verified.organization))


class TwilioStatus(WebhookView):
    """Status callbacks of our SMS and calls (the idempotency key rides in ?k=)."""

    provider = "twilio"

    def verify(self, request: HttpRequest) -> Verified:
        params = _form(request)
        return _twilio_signer(request, params.get("From", ""), params.get("To", ""), channel=_status_channel(params))

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        intake.receive(items, channel=_status_channel(_form(request)), organization=verified.organization)
        return _twiml([])


class TwilioVoice(WebhookView):
    """Recording/transcription callbacks of our calls: the transcript becomes a call_report episode."""

    provider = "twilio"

    def verify(self, request: HttpRequest) -> Verified:
        params = _form(request)
        return _twilio_signer(request, params.get("From", ""), params.get("To", ""), channel=Channel.VOICE)

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        intake.receive(items, channel=Channel.VOICE, organization=verified.organization)
        return _twiml([])


class SlackEvents(WebhookView):
    provider = "slack"
    signs_time = True

    def verify(self, request: HttpRequest) -> Verified:
        payload = _json(request)
        if payload is None:
            raise Refused(400, "expected a JSON object")
        candidates = recipients.for_slack(payload)
        return first_verified(request, [(registry.connector_for(i), i.organization) for i in candidates])

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        payload = _json(request) or {}
        if payload.get("type") == "url_verification":
            return JsonResponse({"challenge": str(payload.get("challenge", ""))})
        intake.receive(items, channel=Channel.SLACK, organization=verified.organization)
        return HttpResponse(status=200)


class SlackInteractions(WebhookView):
    """Button clicks on escalation notices (Block Kit `block_actions`), form-encoded with a JSON `payload`.
    The answer's outcome is shown to the person who clicked only (ephemeral), never as an error status."""

    provider = "slack"
    signs_time = True

    def verify(self, request: HttpRequest) -> Verified:
        team = (_interaction(request).get("team") or {})
        candidates = recipients.for_slack({"team_id": team.get("id") if isinstance(team, dict) else None})
        return first_verified(request, [(registry.connector_for(i), i.organization) for i in candidates])

    def parse(self, request: HttpRequest, verified: Verified) -> list[ParsedInbound]:
        payload = _interaction(request)
        if payload.get("type") != "block_actions" or _click(payload) is None:
            raise Refused(400, "expected a block_actions payload with one button click")
        if problem := untrusted_input.json_problem(payload):
            raise Refused(400, f"unstorable slack payload: {problem}")
        return []

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        payload = _interaction(request)
        value = _click(payload)
        if not value:
            return HttpResponse(status=200)  # the notice's "Open in the Studio" link: Slack opened it
        user = payload.get("user") or {}
        text = notice_clicks.answer_click(verified.organization, value=value,
                                          slack_user=str(user.get("id", "")) if isinstance(user, dict) else "")
        response_url = payload.get("response_url")
        if isinstance(response_url, str) and response_url:
            connector = verified.connector
            transaction.on_commit(lambda: connector.respond(response_url, text=text))
        return JsonResponse({"response_type": "ephemeral", "replace_original": False, "text": text})


class Sandbox(WebhookView):
    """The tests' inbound path, signed with connectors.sandbox.sign_body (a key derived from SECRET_KEY).
    Answers only with DEBUG on or LUCIA_SANDBOX_WEBHOOK set; elsewhere it does not exist (404)."""

    provider = "sandbox"

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        if not (settings.DEBUG or settings.LUCIA_SANDBOX_WEBHOOK):
            raise Http404("no sandbox webhook here")
        return super().post(request, *args, **kwargs)

    def verify(self, request: HttpRequest) -> Verified:
        payload = _json(request)
        if payload is None:
            raise Refused(400, "expected a JSON object")
        identity = recipients.for_sandbox(_sandbox_recipient(payload))
        # The key is not an identity's: an unsaved identity verifies it when nobody owns the address.
        connector = registry.connector_class(Channel.SANDBOX)(
            identity or Identity(channel=Channel.SANDBOX, sandbox=True), secrets={}
        )
        return first_verified(request, [(connector, identity.organization if identity else None)])

    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        return JsonResponse({"replies": intake.receive(items, channel=Channel.SANDBOX,
                                                       organization=verified.organization)})


def _interaction(request: HttpRequest) -> dict:
    try:
        return slack.interaction_of(request.body)
    except (ValueError, UnicodeError) as exc:
        raise Refused(400, "expected a form with a JSON `payload` field") from exc


def _click(payload: dict) -> str | None:
    """The value of the clicked button ('' for a link button, which carries none); None when the payload
    carries no usable click."""
    actions = payload.get("actions")
    action = actions[0] if isinstance(actions, list) and len(actions) == 1 else None
    if not isinstance(action, dict):
        return None
    value = action.get("value", "")
    return value if isinstance(value, str) and len(value) <= 2000 else None


def _twilio_signer(request: HttpRequest, *numbers: str, channel: str) -> Verified:
    candidates = recipients.for_numbers(*numbers, channel=channel)
    return first_verified(request, [(registry.connector_for(i), i.organization) for i in candidates])


def _status_channel(params: QueryDict) -> str:
    return Channel.VOICE if "CallSid" in params and "MessageSid" not in params else Channel.SMS


def _form(request: HttpRequest) -> QueryDict:
    # From the raw body: reading request.POST first would make the body unreadable for the signature check.
    return QueryDict(request.body.decode("utf-8", errors="replace"))


def _form_value(request: HttpRequest, name: str) -> str:
    """A field of a form or multipart post, read before verification only to pick a key ('' when unreadable)."""
    try:
        return str(request.POST.get(name, ""))
    except (MultiPartParserError, ValueError, UnicodeError):
        return ""  # names no mailbox; the signature check refuses the post


def _json(request: HttpRequest) -> dict | None:
    try:
        payload = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def _sandbox_recipient(payload: dict) -> str:
    """The `to` of the (first) item: picks the organization, read defensively since nothing is verified yet."""
    items = payload.get("messages") if "messages" in payload else [payload]
    first = items[0] if isinstance(items, list) and items else None
    return str(first.get("to", "")) if isinstance(first, dict) else ""


def _twiml(replies: list[str]) -> HttpResponse:
    body = "".join(f"<Message>{escape(text)}</Message>" for text in replies)
    return HttpResponse(TWIML.format(body), content_type="text/xml")
