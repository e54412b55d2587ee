"""Webhook endpoints: find the identity, verify the signature on the raw body, hand the items to intake.

Thin on purpose: a bad or missing signature answers 403 before anything is
parsed or stored, and the work behind a good one is database writes only (the
run advances later on a worker), so providers get their answer at once —
Slack wants it within 3 s.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import escape

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseForbidden,
    JsonResponse,
    QueryDict,
)
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from connectors import registry
from connectors.models import Channel, Identity
from lucia_site.webhooks import intake, recipients

TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response>{}</Response>'


@csrf_exempt
@require_POST
def twilio_sms(request: HttpRequest) -> HttpResponse:
    params = _form(request)
    candidates = recipients.for_numbers(params.get("To", ""), channel=Channel.SMS)
    connector = recipients.verified_connector(request, candidates)
    if connector is None:
        return _forbidden()
    replies = intake.receive(connector.parse_inbound(request), channel=Channel.SMS,
                             organization=connector.identity.organization)
    return _twiml(replies)


@csrf_exempt
@require_POST
def twilio_status(request: HttpRequest) -> HttpResponse:
    """Status callbacks of our SMS and calls (the idempotency key rides in ?k=)."""
    params = _form(request)
    channel = Channel.VOICE if "CallSid" in params and "MessageSid" not in params else Channel.SMS
    candidates = recipients.for_numbers(params.get("From", ""), params.get("To", ""), channel=channel)
    connector = recipients.verified_connector(request, candidates)
    if connector is None:
        return _forbidden()
    intake.receive(connector.parse_inbound(request), channel=channel, organization=connector.identity.organization)
    return _twiml([])


@csrf_exempt
@require_POST
def twilio_voice(request: HttpRequest) -> HttpResponse:
    """Recording/transcription callbacks of our calls: the transcript becomes a call_report episode."""
    params = _form(request)
    candidates = recipients.for_numbers(params.get("From", ""), params.get("To", ""), channel=Channel.VOICE)
    connector = recipients.verified_connector(request, candidates)
    if connector is None:
        return _forbidden()
    intake.receive(connector.parse_inbound(request), channel=Channel.VOICE,
                   organization=connector.identity.organization)
    return _twiml([])


@csrf_exempt
@require_POST
def slack_events(request: HttpRequest) -> HttpResponse:
    payload = _json(request)
    if payload is None:
        return HttpResponseBadRequest("expected a JSON object")
    connector = recipients.verified_connector(request, recipients.for_slack(payload))
    if connector is None:
        return _forbidden()
    if payload.get("type") == "url_verification":
        return JsonResponse({"challenge": str(payload.get("challenge", ""))})
    intake.receive(connector.parse_inbound(request), channel=Channel.SLACK,
                   organization=connector.identity.organization)
    return HttpResponse(status=200)


@csrf_exempt
@require_POST
def sandbox(request: HttpRequest) -> HttpResponse:
    """The simulator's and tests' inbound path, signed with connectors.sandbox.sign_body."""
    payload = _json(request)
    if payload is None:
        return HttpResponseBadRequest("expected a JSON object")
    identity = recipients.for_sandbox(_sandbox_recipient(payload))
    # The sandbox signature is keyed from SECRET_KEY, not from an identity: an unsaved one verifies it.
    connector = registry.connector_class(Channel.SANDBOX)(
        identity or Identity(channel=Channel.SANDBOX, sandbox=True), secrets={}
    )
    if not connector.verify_request(request):
        return _forbidden()
    try:
        items = connector.parse_inbound(request)
    except (AttributeError, KeyError, TypeError, ValueError):
        # Signed but malformed: a bug in the simulator or a test, not a provider to retry.
        return HttpResponseBadRequest("malformed sandbox message")
    replies = intake.receive(items, channel=Channel.SANDBOX, organization=identity.organization if identity else None)
    return JsonResponse({"replies": replies})


def _form(request: HttpRequest) -> QueryDict:
    # From the raw body: reading request.POST first would make the body unreadable for the signature check.
    return QueryDict(request.body.decode("utf-8", errors="replace"))


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


def _forbidden() -> HttpResponse:
    return HttpResponseForbidden("invalid or missing signature")


def _twiml(replies: list[str]) -> HttpResponse:
    body = "".join(f"<Message>{escape(text)}</Message>" for text in replies)
    return HttpResponse(TWIML.format(body), content_type="text/xml")
