import json

import pytest

from connectors import message_ids, suppressions
from connectors.models import InboundMessage
from connectors.sandbox import SIGNATURE_HEADER, sign_body
from tests.factories import OrganizationFactory
from tests.lucia_site.webhooks.support import identity, inbound_episodes, run_with_contact

pytestmark = pytest.mark.django_db

SIM_NUMBER = "+15005550099"


@pytest.fixture(autouse=True)
def _sandbox_webhook_on(settings):
    settings.LUCIA_SANDBOX_WEBHOOK = True


def _post(client, payload: dict, *, signature: str | None = None):
    body = json.dumps(payload).encode()
    header = {f"HTTP_{SIGNATURE_HEADER.upper().replace('-', '_')}": signature or sign_body(body)}
    return client.post("/hooks/sandbox/", data=body, content_type="application/json", **header)


def test_a_signed_sandbox_reply_routes_by_its_reply_address(client):
    run = run_with_contact(email="dana@vendor.test")
    item = {"provider_id": "sim-1", "from": "dana@vendor.test", "to": message_ids.reply_address(run.pk),
            "subject": "Re: W-9", "text": "Attached.",
            "attachments": [{"filename": "w9.pdf", "content_type": "application/pdf", "size": 3, "sha256": "x"}]}

    response = _post(client, {"messages": [item]})
    _post(client, {"messages": [item]})

    assert response.status_code == 200
    [episode] = inbound_episodes(run)
    assert episode.payload["channel"] == "email" and episode.dedupe_key == "sandbox:sim-1"


def test_a_sandbox_stop_suppresses_the_number_for_the_identitys_organization(client):
    organization = OrganizationFactory(slug="acme-sim")
    identity(organization, "sms", SIM_NUMBER, sandbox=True)

    _post(client, {"provider_id": "sim-2", "kind": "stop", "from": "+12125550123", "to": SIM_NUMBER, "text": "STOP"})

    assert suppressions.is_suppressed(organization, channel="sms", address="+12125550123")


def test_the_sandbox_webhook_does_not_exist_without_debug_or_its_setting(client, settings):
    settings.DEBUG, settings.LUCIA_SANDBOX_WEBHOOK = False, False
    payload = {"provider_id": "sim-0", "from": "x@y.test", "to": "z@y.test", "text": "hi"}

    assert _post(client, payload).status_code == 404
    assert not InboundMessage.objects.exists()


def test_an_unsigned_or_forged_sandbox_post_is_refused_and_stores_nothing(client):
    payload = {"provider_id": "sim-3", "from": "x@y.test", "to": "z@y.test", "text": "hi"}

    assert _post(client, payload, signature="0" * 64).status_code == 403
    assert client.post("/hooks/sandbox/", data=payload, content_type="application/json").status_code == 403
    assert not InboundMessage.objects.exists()


def test_a_malformed_body_is_refused_without_an_error(client):
    assert _post(client, {"messages": "not a list"}).status_code == 400
    assert _post(client, {"messages": "not a list"}, signature="0" * 64).status_code == 403
    assert client.post("/hooks/sandbox/", data=b"[1, 2]", content_type="application/json").status_code == 400
    assert not InboundMessage.objects.exists()
