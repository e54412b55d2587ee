import json
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from connectors import message_ids, suppressions
from connectors.models import DeliveryEvent, InboundMessage, Suppression
from runs.models import Episode, Escalation, Run
from tests.connectors.conftest import MAIL_DOMAIN, MAILGUN_SIGNING_KEY, load_payload
from tests.factories import OrganizationFactory
from tests.lucia_site.webhooks.support import identity, inbound_episodes, mailgun_signature, run_with_contact, sent
from tests.runs.fakes import queued_run_ids

pytestmark = pytest.mark.django_db

DANA = "dana@vendor.test"
MAILBOX = f"billing@{MAIL_DOMAIN}"
KEY = "e7" * 32
PDF = b"%PDF-1.4 signed W-9"
INBOUND = "/hooks/email/mailgun/inbound/"
TRACKING = "/hooks/email/mailgun/tracking/"


@pytest.fixture(autouse=True)
def _mailgun_key(settings):
    # Lucia's own Mailgun account key: the site's webhook signing key.
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_SIGNING_KEY}


@pytest.fixture
def acme():
    organization = OrganizationFactory(name="Acme")
    identity(organization, "email", MAILBOX, api_key="key-test")
    return organization


def _post_inbound(client, *, run_id: int = 0, message_key: str = KEY[:32], token: str = "b" * 50,
                  key: str = MAILGUN_SIGNING_KEY, timestamp: str | None = None, **fields: str):
    stamp = timestamp or str(int(time.time()))
    data = load_payload("mailgun/inbound_reply.json", timestamp=stamp, token=token, message_key=message_key,
                        run_token=message_ids.reply_token(run_id) if run_id else "nobody",
                        signature=mailgun_signature(timestamp=stamp, token=token, key=key))
    data.update(fields)
    data["attachment-1"] = SimpleUploadedFile("w9-signed.pdf", PDF, content_type="application/pdf")
    return client.post(INBOUND, data=data)


def _post_tracking(client, fixture: str, *, token: str = "t" * 50, key: str = MAILGUN_SIGNING_KEY):
    stamp = str(int(time.time()))
    payload = load_payload(fixture, timestamp=stamp, token=token, idem_key=KEY, message_key=KEY[:32],
                           run_token="x", signature=mailgun_signature(timestamp=stamp, token=token, key=key))
    return client.post(TRACKING, data=json.dumps(payload), content_type="application/json")


def test_a_reply_to_the_runs_reply_address_becomes_its_episode(client, acme):
    run = run_with_contact(acme, email=DANA)

    response = _post_inbound(client, run_id=run.pk)

    assert response.status_code == 200
    [episode] = inbound_episodes(run)
    payload = episode.payload
    assert (payload["channel"], payload["from"], payload["subject"]) == ("email", DANA, "Re: W-9 for vendor onboarding")
    assert payload["text"].startswith("Signed W-9 attached.")
    assert payload["headers"]["in_reply_to"] == f"<{KEY[:32]}@in.lucia.test>"
    [attachment] = payload["attachments"]
    assert attachment["filename"] == "w9-signed.pdf" and "content_b64" not in attachment
    message = InboundMessage.objects.get()
    assert (message.status, message.matched_run_id, message.organization_id) == ("matched", run.pk, acme.pk)
    [stored] = message.files.all()
    assert (bytes(stored.content), stored.sniffed_type, stored.size) == (PDF, "application/pdf", len(PDF))
    assert attachment["attachment_id"] == stored.pk and "content_b64" not in message.attachments[0]
    assert episode.dedupe_key == "email:<CAF=vendor-reply-0001@mail.vendor.test>"
    assert queued_run_ids() == [run.pk]


def test_a_reply_threaded_on_our_message_id_finds_the_run_that_sent_it(client, acme):
    run = run_with_contact(acme, email=DANA)
    sent(run, channel="email", idem_key=KEY)

    _post_inbound(client, recipient=MAILBOX)

    assert len(inbound_episodes(run)) == 1


def test_an_unmatched_email_is_kept_for_triage(client, acme):
    run = run_with_contact(acme, email=DANA)

    response = _post_inbound(client, recipient=MAILBOX, message_key="f" * 32)

    assert response.status_code == 200
    assert not inbound_episodes(run)
    message = InboundMessage.objects.get()
    assert (message.status, message.organization_id, message.matched_run_id) == ("unmatched", acme.pk, None)
    escalation = Escalation.objects.get()
    assert (escalation.kind, escalation.organization_id, escalation.inbound_message_id) == (
        "unmatched_inbound", acme.pk, message.pk)
    assert escalation.context["from"] == DANA and escalation.context["reason"] == "no_run"


def test_a_reply_for_an_ended_run_goes_to_triage_naming_the_run(client, acme):
    run = run_with_contact(acme, email=DANA)
    Run.objects.filter(pk=run.pk).update(status="completed")

    _post_inbound(client, run_id=run.pk)

    assert not inbound_episodes(run)
    message = InboundMessage.objects.get()
    assert (message.status, message.matched_run_id) == ("unmatched", run.pk)
    escalation = Escalation.objects.get()
    assert escalation.context["reason"] == "run_ended" and escalation.context["run_id"] == run.pk


def test_mailgun_retries_with_a_new_token_make_one_episode(client, acme):
    run = run_with_contact(acme, email=DANA)

    _post_inbound(client, run_id=run.pk, token="b" * 50)
    again = _post_inbound(client, run_id=run.pk, token="c" * 50)

    assert again.status_code == 200
    assert len(inbound_episodes(run)) == 1 and InboundMessage.objects.count() == 1


def test_a_bad_signature_is_refused_and_nothing_is_stored(client, acme):
    run = run_with_contact(acme, email=DANA)
    sent(run, channel="email", idem_key=KEY)

    inbound = _post_inbound(client, run_id=run.pk, key="not-the-key")
    tracking = _post_tracking(client, "mailgun/tracking_complained.json", key="not-the-key")

    assert (inbound.status_code, tracking.status_code) == (403, 403)
    assert not InboundMessage.objects.exists() and not DeliveryEvent.objects.exists()
    assert not Suppression.objects.exists() and not Episode.objects.filter(kind="inbound").exists()


def test_a_complaint_is_recorded_once_and_suppresses_the_address_for_the_sending_organization(client, acme):
    run = run_with_contact(acme, email=DANA)
    sent(run, channel="email", idem_key=KEY)

    response = _post_tracking(client, "mailgun/tracking_complained.json")
    _post_tracking(client, "mailgun/tracking_complained.json")

    assert response.status_code == 200
    event = DeliveryEvent.objects.get()
    assert (event.channel, event.event_type, event.idem_key) == ("email", "complained", KEY)
    assert suppressions.is_suppressed(acme, channel="email", address="Dana@Vendor.test")
    assert Suppression.objects.get().reason == "complaint"


def test_a_delivered_event_is_recorded_without_suppressing(client, acme):
    run = run_with_contact(acme, email=DANA)
    sent(run, channel="email", idem_key=KEY)

    _post_tracking(client, "mailgun/tracking_delivered.json")

    assert DeliveryEvent.objects.get().event_type == "delivered"
    assert not Suppression.objects.exists()


def test_a_replayed_token_with_another_body_is_refused_and_stores_nothing(client, acme):
    run = run_with_contact(acme, email=DANA)
    first = _post_inbound(client, run_id=run.pk, token="r" * 50)

    # The captured signature (timestamp + token) on a different message, for a different run.
    other = run_with_contact(acme, email=DANA)
    replayed = _post_inbound(client, run_id=other.pk, token="r" * 50, subject="Wire the money")

    assert (first.status_code, replayed.status_code) == (200, 403)
    assert InboundMessage.objects.count() == 1 and not inbound_episodes(other)


def test_a_stale_or_future_signature_is_refused_and_stores_nothing(client, acme, time_machine):
    run = run_with_contact(acme, email=DANA)
    signed_at = "1772452800"  # 2026-03-02 12:00:00Z; the window is LUCIA_WEBHOOK_MAX_AGE_S=300

    time_machine.move_to("2026-03-02 12:05:01Z", tick=False)
    stale = _post_inbound(client, run_id=run.pk, timestamp=signed_at)
    time_machine.move_to("2026-03-02 11:58:00Z", tick=False)
    future = _post_inbound(client, run_id=run.pk, timestamp=signed_at)
    time_machine.move_to("2026-03-02 12:04:59Z", tick=False)
    fresh = _post_inbound(client, run_id=run.pk, timestamp=signed_at)

    assert (stale.status_code, future.status_code, fresh.status_code) == (403, 403, 200)
    assert InboundMessage.objects.count() == 1


def test_mail_to_a_mailbox_on_the_same_domain_is_not_given_to_its_owner(client, acme):
    """Only an exact mailbox or a reply token names an organization; a domain never does."""
    _post_inbound(client, recipient=f"someone-else@{MAIL_DOMAIN}")

    message = InboundMessage.objects.get()
    assert (message.status, message.organization_id) == ("unmatched", None)
    assert not Escalation.objects.exists()


def test_an_identitys_own_signing_key_reports_only_on_its_organizations_sends(client, acme):
    """An organization with its own Mailgun account signs with its own key; that key cannot act for another."""
    globex = OrganizationFactory(name="Globex")
    identity(globex, "email", "ap@globex.test", api_key="key-globex", webhook_signing_key="globex-own-key")
    ours = run_with_contact(acme, email=DANA)
    sent(ours, channel="email", idem_key=KEY)
    stamp = str(int(time.time()))

    def tracking(*, sender: str, key: str, idem_key: str, token: str):
        payload = load_payload("mailgun/tracking_complained.json", timestamp=stamp, token=token, idem_key=idem_key,
                               message_key=idem_key[:32], run_token="x",
                               signature=mailgun_signature(timestamp=stamp, token=token, key=key))
        payload["event-data"]["envelope"]["sender"] = sender
        return client.post(TRACKING, data=json.dumps(payload), content_type="application/json")

    # Globex's key on Acme's send: verified, but Acme's send is not Globex's to report on.
    forged = tracking(sender="ap@globex.test", key="globex-own-key", idem_key=KEY, token="f" * 50)
    assert forged.status_code == 200
    assert not DeliveryEvent.objects.exists() and not Suppression.objects.exists()

    # Globex's key on Globex's own send: recorded and suppressed for Globex.
    theirs = run_with_contact(globex, email=DANA)
    sent(theirs, channel="email", idem_key="9d" * 32)
    own = tracking(sender="ap@globex.test", key="globex-own-key", idem_key="9d" * 32, token="g" * 50)
    assert own.status_code == 200
    assert suppressions.is_suppressed(globex, channel="email", address=DANA)
    assert not suppressions.is_suppressed(acme, channel="email", address=DANA)


def test_other_providers_anymail_views_are_not_mounted(client):
    assert client.post("/hooks/email/postmark/tracking/", data="{}", content_type="application/json").status_code == 404
