"""Phone calls through Twilio Voice: say the brief, record the answer, get a transcript back.

The key rides in the status-callback and transcription-callback URLs (`?k=`).
A call resource keeps neither its TwiML nor its callback URLs, so lookup reads
the status callbacks received for the key first (a match on our key); failing
that, calls from our number to the recipient since the attempt whose callbacks
did not name another of our keys are candidates: none is "not sent"; the
runtime rules out those another send of its own owns, and adopts only a single
one left (several cannot be told apart).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.http import HttpRequest
from django.utils import timezone

from connectors import twilio_client
from connectors.base import (
    Connector,
    LookupResult,
    OutboundMessage,
    ParsedInbound,
    SendResult,
    SignatureStamp,
    callback_url,
    claimed_by_other_keys,
    recorded_delivery,
)
from connectors.models import Channel

STATUS_PATH = "/hooks/twilio/status/"
VOICE_PATH = "/hooks/twilio/voice/"
CLOCK_SLACK = timedelta(minutes=1)


class VoiceConnector(Connector):
    channel = Channel.VOICE

    def send(self, message: OutboundMessage) -> SendResult:
        client = twilio_client.make_client(self._credentials())
        twiml = twilio_client.say_and_record(
            message.brief or message.body, transcribe_callback=callback_url(VOICE_PATH, idem_key=message.idem_key)
        )
        status_callback = message.status_callback_url or callback_url(STATUS_PATH, idem_key=message.idem_key)
        try:
            # Every state change, not only "completed": an early callback carrying the key settles a lookup.
            call = client.calls.create(
                to=message.to, from_=self.identity.address, twiml=twiml, status_callback=status_callback,
                status_callback_event=["initiated", "ringing", "answered", "completed"],
            )
        except twilio_client.PROVIDER_ERRORS as exc:
            raise twilio_client.connector_error(exc) from exc
        return SendResult(provider_message_id=call.sid, accepted_at=call.date_created or timezone.now())

    def lookup(self, message: OutboundMessage, *, sent_after: datetime) -> LookupResult:
        event = recorded_delivery(self.channel, message.idem_key)
        if event:
            return LookupResult(found=True, provider_message_id=event.provider_message_id)
        try:
            client = twilio_client.make_client(self._credentials())
            records = client.calls.stream(to=message.to, from_=self.identity.address, limit=twilio_client.LOOKUP_LIMIT)
            calls = twilio_client.recent(records, since=sent_after - CLOCK_SLACK)
        except twilio_client.PROVIDER_ERRORS as exc:
            return twilio_client.lookup_failure(exc)
        sids = [call.sid for call in calls]
        others = claimed_by_other_keys(self.channel, sids, idem_key=message.idem_key)
        sids = [sid for sid in sids if sid not in others]
        if not sids:
            return LookupResult(found=False)
        return LookupResult(found=True, provider_message_id=sids[0], candidates=tuple(sids))

    def verify_request(self, request: HttpRequest) -> bool:
        return twilio_client.verify(request, auth_token=self.secrets.get("auth_token", ""))

    def signature_stamp(self, request: HttpRequest) -> SignatureStamp:
        return SignatureStamp(nonce=twilio_client.signature_of(request))

    def parse_inbound(self, request: HttpRequest) -> list[ParsedInbound]:
        params = twilio_client.form_params(request)
        if "CallSid" not in params:
            return []
        idem_key = request.GET.get("k")
        outbound = params.get("Direction", "").startswith("outbound")
        # The other party: the callee of our calls, the caller of calls to our number.
        party, ours = (params.get("To", ""), params.get("From", "")) if outbound else (
            params.get("From", ""), params.get("To", ""))
        headers = {"direction": params.get("Direction", ""), "call_sid": params["CallSid"]}
        if "TranscriptionSid" in params:
            return [ParsedInbound(
                provider_id=params["TranscriptionSid"],
                kind="call_report",
                from_address=party,
                to_address=ours,
                text=params.get("TranscriptionText", ""),
                status=params.get("TranscriptionStatus"),
                idem_key=idem_key,
                provider_message_id=params["CallSid"],
                headers={**headers, "recording_url": params.get("RecordingUrl", "")},
                raw=params,
            )]
        status = params.get("CallStatus", "")
        return [ParsedInbound(
            # One row per state change of the call.
            provider_id=f"{params['CallSid']}:{status}",
            kind="status",
            from_address=party,
            to_address=ours,
            status=status,
            idem_key=idem_key,
            provider_message_id=params["CallSid"],
            headers={**headers, "duration": params.get("CallDuration", "")},
            raw=params,
        )]

    def _credentials(self) -> dict[str, str]:
        self.require_secret("account_sid")
        self.require_secret("auth_token")
        return self.secrets
