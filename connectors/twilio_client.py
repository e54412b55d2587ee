"""The only module importing `twilio`: client construction, error mapping, webhook signatures, TwiML.

SMS and voice share one Twilio account per identity (secrets `account_sid`,
`auth_token`, optional `api_base_url` for a local fake), so they share this code.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import requests
from django.http import HttpRequest, QueryDict
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.http.http_client import TwilioHttpClient
from twilio.request_validator import RequestValidator
from twilio.rest import Client
from twilio.twiml.voice_response import VoiceResponse

from connectors.base import LookupResult, public_url_of
from connectors.errors import ConnectorError, transport_error

# Errors after which the same request can never succeed.
# 21610: recipient replied STOP; 21211: invalid To number; 21614: not a mobile number;
# 21612/21408: route or region not permitted; 20003: bad credentials.
PERMANENT_CODES = {21610, 21211, 21614, 21612, 21408, 20003}
REQUEST_TIMEOUT_S = 15
LOOKUP_LIMIT = 200
SIGNATURE_HEADER = "X-Twilio-Signature"

# Exceptions the connectors translate; anything else is a bug and propagates.
PROVIDER_ERRORS = (TwilioException, requests.RequestException)


def make_client(secrets: dict[str, str]) -> Client:
    # No retries in the HTTP client: a retried create after a dropped connection can send twice.
    client = Client(
        secrets["account_sid"], secrets["auth_token"], http_client=TwilioHttpClient(timeout=REQUEST_TIMEOUT_S)
    )
    if secrets.get("api_base_url"):
        client.api.base_url = secrets["api_base_url"]
    return client


def connector_error(exc: Exception) -> ConnectorError:
    """Map a Twilio or transport failure of a create call to ConnectorError."""
    if isinstance(exc, TwilioRestException):
        code = str(exc.code) if exc.code else None
        if exc.code in PERMANENT_CODES or (400 <= exc.status < 500 and exc.status != 429):
            return ConnectorError(exc.msg or f"Twilio {exc.status}", permanent=True, code=code)
        # 429 means refused; a 5xx may have been processed before failing.
        return ConnectorError(exc.msg or f"Twilio {exc.status}", code=code, outcome_unknown=exc.status >= 500)
    return transport_error(exc, provider="Twilio")


def lookup_failure(exc: Exception) -> LookupResult:
    """A list call that failed: the provider could not be asked now (unreachable, 5xx, 429), so ask again
    later; a refusal that will not change (bad credentials) cannot answer at all."""
    transient = not isinstance(exc, TwilioRestException) or exc.status == 429 or exc.status >= 500
    return LookupResult(found=None, transient=transient)


def recent(records: Iterator[Any], *, since: datetime) -> list[Any]:
    """Records created at or after `since`. Filtered here, not by DateSent/StartTime on the
    server: a queued message or call has no send/start time yet and would be missed."""
    # An unknown creation time counts as inside: missing a send is worse than asking a human.
    return [record for record in records if record.date_created is None or record.date_created >= since]


def verify(request: HttpRequest, *, auth_token: str) -> bool:
    """Twilio's signature over LUCIA_PUBLIC_URL + path + sorted form params (or the body hash for JSON)."""
    signature = request.headers.get(SIGNATURE_HEADER, "")
    if not signature or not auth_token:
        return False
    url = public_url_of(request)
    body = request.body.decode("utf-8", errors="replace")
    # JSON webhooks carry ?bodySHA256= and are signed over the URL only; form posts over their params.
    params: Any = body if "bodySHA256" in request.GET else QueryDict(body)
    # RequestValidator compares in constant time.
    return RequestValidator(auth_token).validate(url, params, signature)


def signature_of(request: HttpRequest) -> str | None:
    """Twilio signs no time, and its signature over URL + params is the same for the same request:
    a repeated signature is the same request again."""
    return request.headers.get(SIGNATURE_HEADER) or None


def form_params(request: HttpRequest) -> dict[str, str]:
    """The webhook's form fields, read from the raw body (single values; Twilio sends no repeats)."""
    return QueryDict(request.body.decode("utf-8", errors="replace")).dict()


def say_and_record(brief: str, *, transcribe_callback: str) -> str:
    """TwiML: say the brief, then record the answer and have Twilio transcribe it to our callback."""
    response = VoiceResponse()
    response.say(brief)
    response.record(transcribe=True, transcribe_callback=transcribe_callback, max_length=120, play_beep=True)
    return str(response)
