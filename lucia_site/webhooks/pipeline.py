"""The webhook pipeline, after anymail's AnymailCoreWebhookView: one class per provider route, validators first.

Each request goes through the same steps, and nothing is written before the
first three pass:

1. verify: the signature over the raw request, with the secret of the
   identity the request is addressed to (or the site's); 403 otherwise;
2. freshness: a provider that signs a time (Mailgun, Slack) must have signed
   within LUCIA_WEBHOOK_MAX_AGE_S, and not more than a minute ahead; 403;
3. parse: a signed body that is not the provider's format is a 400;
4. in one transaction, claim the signature's one-time value in the replay
   table (403 when it was seen) and store and route the items.

The claim shares the transaction that stores the request's effects, so a
delivery that fails leaves the value free for the provider's retry, and two
concurrent copies of one request cannot both pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from agents.models import Organization
from connectors import nonces
from connectors.base import Connector, ParsedInbound, SignatureStamp
from lucia_site import untrusted_input

# Provider clocks run a little ahead of ours at most; a time further ahead was not signed now.
MAX_FUTURE_S = 60
# Providers that sign no time: a repeated signature is refused for this long; after it, the inbound
# store's (channel, provider id) uniqueness still keeps a replay from storing anything twice.
UNTIMED_NONCE_TTL = timedelta(days=7)
# What parsing a signed but garbled body raises.
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, UnicodeError)


class Refused(Exception):
    """The request is refused before anything is stored."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Verified:
    """A request whose signature verified: the connector whose secret did it, and that secret's owner
    (None when the site's own key signed: Lucia's account, not an organization's)."""

    connector: Connector
    organization: Organization | None


@method_decorator(csrf_exempt, name="dispatch")
class WebhookView(ABC, View):
    """Subclasses set `provider` (the replay table's namespace) and `signs_time`, and implement
    verify and receive (parse too, where the connector's parse_inbound is not enough)."""

    http_method_names = ["post"]
    provider = ""
    signs_time = False

    def post(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        _ = request.body  # the raw body, cached before anything parses the stream
        now = timezone.now()
        try:
            verified = self.verify(request)
            stamp = verified.connector.signature_stamp(request)
            self.check_fresh(stamp, now=now)
            if not stamp.nonce:
                raise Refused(403, "the signature carries no one-time value")
            items = self.parse(request, verified)
        except Refused as refused:
            return HttpResponse(refused.reason, status=refused.status, content_type="text/plain")
        with transaction.atomic():
            if not nonces.claim(self.provider, stamp.nonce, now=now, expires_at=self.nonce_expiry(stamp, now=now)):
                return HttpResponse("this signed request was already received", status=403,
                                    content_type="text/plain")
            response = self.receive(request, items, verified)
        nonces.prune(now=now)
        return response

    def check_fresh(self, stamp: SignatureStamp, *, now: datetime) -> None:
        if not self.signs_time:
            return
        if stamp.signed_at is None:
            raise Refused(403, "the signature carries no timestamp")
        age = now.timestamp() - stamp.signed_at
        if age > settings.LUCIA_WEBHOOK_MAX_AGE_S:
            raise Refused(403, "the signature is too old")
        if age < -MAX_FUTURE_S:
            raise Refused(403, "the signature's timestamp is in the future")

    def nonce_expiry(self, stamp: SignatureStamp, *, now: datetime) -> datetime:
        if self.signs_time and stamp.signed_at is not None:
            # Past this, the freshness check refuses the request anyway.
            window = settings.LUCIA_WEBHOOK_MAX_AGE_S + MAX_FUTURE_S
            return max(now, datetime.fromtimestamp(stamp.signed_at, tz=now.tzinfo)) + timedelta(seconds=window)
        return now + UNTIMED_NONCE_TTL

    @abstractmethod
    def verify(self, request: HttpRequest) -> Verified:
        """The verified connector; raises Refused(403) when no candidate secret verifies the signature."""

    def parse(self, request: HttpRequest, verified: Verified) -> list[ParsedInbound]:
        """The request's items; a body the provider would not send is Refused(400)."""
        try:
            items = verified.connector.parse_inbound(request)
        except MALFORMED as exc:
            raise Refused(400, f"malformed {self.provider} payload") from exc
        for item in items:
            # PostgreSQL refuses NUL in text and jsonb: refuse here rather than fail while storing.
            if problem := untrusted_input.json_problem(asdict(item)):
                raise Refused(400, f"unstorable {self.provider} payload: {problem}")
        return items

    @abstractmethod
    def receive(self, request: HttpRequest, items: list[ParsedInbound], verified: Verified) -> HttpResponse:
        """Store and route the items (inside the claim's transaction); the provider's answer."""


def first_verified(request: HttpRequest, candidates: list[tuple[Connector, Organization | None]]) -> Verified:
    """The first candidate whose secret verifies the request, else Refused(403)."""
    for connector, organization in candidates:
        if connector.verify_request(request):
            return Verified(connector=connector, organization=organization)
    raise Refused(403, "invalid or missing signature")
