"""Every provider route × {missing, wrong, stale, replayed, malformed} signature → 4xx, and no table gains a row.

Each route first accepts one correctly signed request (so the matrix cannot
pass by refusing everything), then the bad variants are posted and every
table of every installed app is counted before and after. Twilio and the
sandbox sign no time, so "stale" has no meaning for them: those cells are
skipped with that reason, visibly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.apps import apps
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from twilio.request_validator import RequestValidator

from connectors import message_ids
from connectors.sandbox import SIGNATURE_HEADER, sign_body
from tests.connectors.conftest import (
    ACCOUNT_SID,
    AUTH_TOKEN,
    MAIL_DOMAIN,
    MAILGUN_SIGNING_KEY,
    OUR_NUMBER,
    SIGNING_SECRET,
    load_payload,
)
from tests.factories import OrganizationFactory
from tests.lucia_site.webhooks.support import PUBLIC_URL, identity, mailgun_signature, run_with_contact, sent

pytestmark = pytest.mark.django_db

KEY = "5a" * 32
DANA_EMAIL, DANA_PHONE = "dana@vendor.test", "+12125550123"
STALE_S = 20 * 60
KINDS = ("missing", "wrong", "stale", "replayed", "malformed")


@pytest.fixture(autouse=True)
def _site(settings):
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_SIGNING_KEY}
    settings.LUCIA_SANDBOX_WEBHOOK = True


@pytest.fixture
def run():
    organization = OrganizationFactory(name="Acme")
    identity(organization, "email", f"billing@{MAIL_DOMAIN}", api_key="key-test")
    identity(organization, "sms", OUR_NUMBER, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN)
    identity(organization, "voice", OUR_NUMBER, account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN)
    identity(organization, "slack", "T0ACME", bot_token="xoxb-x", signing_secret=SIGNING_SECRET)
    identity(OrganizationFactory(slug="acme-sim"), "sms", "+15550000001", sandbox=True)
    found = run_with_contact(organization, email=DANA_EMAIL, phone=DANA_PHONE, slack_user="U0DANA")
    sent(found, channel="email", idem_key=KEY)
    return found


@dataclass(frozen=True)
class Request:
    path: str
    data: object
    content_type: str
    headers: dict

    def post(self, client: Client):
        if self.content_type == "multipart":
            return client.post(self.path, data=self.data, **self.headers)
        return client.post(self.path, data=self.data, content_type=self.content_type, **self.headers)


# --- how each provider signs -------------------------------------------------------------------------------------

def _mailgun_inbound(run, *, stamp: str | None = None, token: str = "m" * 50, key: str = MAILGUN_SIGNING_KEY,
                     drop: bool = False, subject: str | None = None, signature: str | None = None) -> Request:
    stamp = stamp or str(int(time.time()))
    fields = load_payload("mailgun/inbound_reply.json", timestamp=stamp, token=token, message_key=KEY[:32],
                          run_token=message_ids.reply_token(run.pk),
                          signature=signature or mailgun_signature(timestamp=stamp, token=token, key=key))
    if drop:
        for name in ("timestamp", "token", "signature"):
            fields.pop(name)
    if subject:
        fields["subject"] = subject
    fields["attachment-1"] = SimpleUploadedFile("w9.pdf", b"%PDF-1.4 w9", content_type="application/pdf")
    return Request("/hooks/email/mailgun/inbound/", fields, "multipart", {})


def _mailgun_tracking(run, *, stamp: str | None = None, token: str = "k" * 50, key: str = MAILGUN_SIGNING_KEY,
                      drop: bool = False, fixture: str = "mailgun/tracking_delivered.json",
                      signature: object = None) -> Request:
    stamp = stamp or str(int(time.time()))
    payload = load_payload(fixture, timestamp=stamp, token=token, idem_key=KEY, message_key=KEY[:32], run_token="x",
                           signature=mailgun_signature(timestamp=stamp, token=token, key=key))
    if drop:
        payload.pop("signature")
    if signature is not None:
        payload["signature"] = signature
    return Request("/hooks/email/mailgun/tracking/", json.dumps(payload), "application/json", {})


def _twilio(path: str, fixture: str) -> Callable[..., Request]:
    def build(run, *, token: str = AUTH_TOKEN, drop: bool = False, signature: str | None = None,
              body: bytes | None = None) -> Request:
        params = load_payload(fixture)
        signed = signature or RequestValidator(token).compute_signature(PUBLIC_URL + path, params)
        headers = {} if drop else {"HTTP_X_TWILIO_SIGNATURE": signed}
        return Request(path, body if body is not None else urlencode(params), "application/x-www-form-urlencoded",
                       headers)
    return build


def _slack(run, *, stamp: int | None = None, secret: str = SIGNING_SECRET, drop: bool = False,
           body: bytes | None = None, raw_stamp: str | None = None, signature: str | None = None) -> Request:
    raw = body if body is not None else json.dumps(load_payload("slack/message_im.json")).encode()
    timestamp = raw_stamp or str(stamp or int(time.time()))
    digest = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + raw, hashlib.sha256).hexdigest()
    headers = {} if drop else {"HTTP_X_SLACK_REQUEST_TIMESTAMP": timestamp,
                               "HTTP_X_SLACK_SIGNATURE": signature or f"v0={digest}"}
    return Request("/hooks/slack/events/", raw, "application/json", headers)


def _slack_click(run, **signing) -> Request:
    """A button click on an escalation notice (form-encoded `payload`), signed like every Slack request; it
    names no escalation of the organization, so the good one answers 200 and changes nothing."""
    click = {"type": "block_actions", "team": {"id": "T0ACME"}, "user": {"id": "U0OPS"},
             "actions": [{"type": "button", "action_id": "lucia_answer:stop_run", "value": "0:stop_run"}]}
    signing.setdefault("body", urlencode({"payload": json.dumps(click)}).encode())
    request = _slack(run, **signing)
    return Request("/hooks/slack/interactions/", request.data, "application/x-www-form-urlencoded", request.headers)


def _sandbox(run, *, body: bytes | None = None, drop: bool = False, signature: str | None = None) -> Request:
    raw = body if body is not None else json.dumps(
        {"provider_id": "sim-matrix", "from": DANA_PHONE, "to": "+15550000001", "text": "hi"}).encode()
    header = {} if drop else {f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}": signature or sign_body(raw)}
    return Request("/hooks/sandbox/", raw, "application/json", header)


# --- the bad variants per route: (good request, then the variants that must each be refused) --------------------

def _old() -> str:
    return str(int(time.time()) - STALE_S)


ROUTES: dict[str, dict[str, Callable]] = {
    "mailgun-inbound": {
        "good": lambda r: [_mailgun_inbound(r, token="g" * 50, stamp=_GOOD_STAMP)],
        "missing": lambda r: [_mailgun_inbound(r, drop=True)],
        "wrong": lambda r: [_mailgun_inbound(r, key="not-the-key")],
        "stale": lambda r: [_mailgun_inbound(r, stamp=_old())],
        # The good request's timestamp + token + signature, on another message.
        "replayed": lambda r: [_mailgun_inbound(r, token="g" * 50, stamp=_GOOD_STAMP,
                                                subject="Change of bank details")],
        "malformed": lambda r: [_mailgun_inbound(r, stamp="soon"), _mailgun_inbound(r, signature="zz\u00e9"),
                                _mailgun_inbound(r, stamp="nan"),
                                Request("/hooks/email/mailgun/inbound/", b"--x\r\ngarbage", "multipart/form-data; "
                                        "boundary=x", {})],
    },
    "mailgun-tracking": {
        "good": lambda r: [_mailgun_tracking(r, token="g" * 50, stamp=_GOOD_STAMP)],
        "missing": lambda r: [_mailgun_tracking(r, drop=True)],
        "wrong": lambda r: [_mailgun_tracking(r, key="not-the-key")],
        "stale": lambda r: [_mailgun_tracking(r, stamp=_old())],
        "replayed": lambda r: [_mailgun_tracking(r, token="g" * 50, stamp=_GOOD_STAMP,
                                                 fixture="mailgun/tracking_complained.json")],
        "malformed": lambda r: [_mailgun_tracking(r, signature=["not", "a", "block"]),
                                _mailgun_tracking(r, signature={"timestamp": {}, "token": 1, "signature": None}),
                                _mailgun_tracking(r, stamp="soon"),
                                Request("/hooks/email/mailgun/tracking/", b"{not json", "application/json", {})],
    },
    "twilio-sms": {"build": _twilio("/hooks/twilio/sms/", "twilio/sms_inbound_mms.json")},
    "twilio-status": {"build": _twilio(f"/hooks/twilio/status/?k={KEY}", "twilio/sms_status_delivered.json")},
    "twilio-voice": {"build": _twilio(f"/hooks/twilio/voice/?k={KEY}", "twilio/voice_transcription.json")},
    "slack-events": {
        "good": lambda r: [_slack(r, stamp=_GOOD_SLACK_STAMP)],
        "missing": lambda r: [_slack(r, drop=True)],
        "wrong": lambda r: [_slack(r, secret="not-our-secret")],
        "stale": lambda r: [_slack(r, stamp=int(time.time()) - STALE_S)],
        "replayed": lambda r: [_slack(r, stamp=_GOOD_SLACK_STAMP)],
        "malformed": lambda r: [_slack(r, raw_stamp="soon"), _slack(r, signature="v0=\u00e9\u00e9"),
                                _slack(r, body=b"\xff\xfe not json"), _slack(r, body=b"[1, 2]"),
                                _slack(r, body=b'{"team_id": "T0ACME", "type": "event_callback", "event": "x"}')],
    },
    "slack-interactions": {
        "good": lambda r: [_slack_click(r, stamp=_GOOD_SLACK_STAMP)],
        "missing": lambda r: [_slack_click(r, drop=True)],
        "wrong": lambda r: [_slack_click(r, secret="not-our-secret")],
        "stale": lambda r: [_slack_click(r, stamp=int(time.time()) - STALE_S)],
        "replayed": lambda r: [_slack_click(r, stamp=_GOOD_SLACK_STAMP)],
        "malformed": lambda r: [_slack_click(r, raw_stamp="soon"), _slack_click(r, body=b"\xff\xfe=%%"),
                                _slack_click(r, body=b"payload=%5B1%2C2%5D"),
                                _slack_click(r, body=urlencode({"payload": json.dumps(
                                    {"type": "block_actions", "team": {"id": "T0ACME"}, "actions": "x"})}).encode())],
    },
    "sandbox": {
        "good": lambda r: [_sandbox(r)],
        "missing": lambda r: [_sandbox(r, drop=True)],
        "wrong": lambda r: [_sandbox(r, signature="0" * 64)],
        "replayed": lambda r: [_sandbox(r)],
        "malformed": lambda r: [_sandbox(r, body=b"{not json"), _sandbox(r, body=b'{"messages": "not a list"}'),
                                _sandbox(r, body=b'{"messages": [{"kind": "launch", "provider_id": 1}]}')],
    },
}
for _name in ("twilio-sms", "twilio-status", "twilio-voice"):
    _build = ROUTES[_name]["build"]
    ROUTES[_name] = {
        "good": lambda r, b=_build: [b(r)],
        "missing": lambda r, b=_build: [b(r, drop=True)],
        "wrong": lambda r, b=_build: [b(r, token="not-the-token")],
        # The good request again, byte for byte: Twilio's signature is the same for the same request.
        "replayed": lambda r, b=_build: [b(r)],
        "malformed": lambda r, b=_build: [b(r, signature="!!not base64!!"), b(r, body=b"\xff\xfe%%%=&=")],
    }

# When the good requests are signed; the test holds the clock just after it.
_GOOD_SLACK_STAMP = int(time.time())
_GOOD_STAMP = str(_GOOD_SLACK_STAMP)
NOT_APPLICABLE = {("twilio-sms", "stale"), ("twilio-status", "stale"), ("twilio-voice", "stale"),
                  ("sandbox", "stale")}


def _row_counts() -> dict[str, int]:
    return {model._meta.label: model._default_manager.count() for model in apps.get_models()}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_bad_signature_is_refused_with_a_4xx_and_no_table_gains_a_row(client, run, route, kind, time_machine):
    if (route, kind) in NOT_APPLICABLE:
        pytest.skip(f"{route} signs no time: a stale signature cannot be told from a fresh one")
    time_machine.move_to(_GOOD_SLACK_STAMP + 1, tick=False)
    cases = ROUTES[route]
    good = cases["good"](run)
    assert [request.post(client).status_code for request in good] == [200] * len(good), "the good request passes"

    before = _row_counts()
    statuses = [request.post(client).status_code for request in cases[kind](run)]

    assert statuses and all(400 <= status < 500 for status in statuses), statuses
    assert _row_counts() == before
