import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors import identities
from connectors.models import Identity
from tests.factories import OrganizationFactory
from tests.fakes.esp_server import MailgunServer
from tests.fakes.slack_server import SlackServer
from tests.fakes.twilio_server import TwilioServer

ACCOUNT_SID = "AC" + "1" * 32
AUTH_TOKEN = "twilio-auth-token"
OUR_NUMBER = "+15005550006"
BOT_TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret"
MAILGUN_KEY = "key-mailgun-test"
MAILGUN_SIGNING_KEY = "mailgun-webhook-signing-key"
MAIL_DOMAIN = "mg.acme.test"


@pytest.fixture(autouse=True)
def _lucia_urls(settings):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_INBOUND_DOMAIN = "in.lucia.test"


@pytest.fixture
def twilio_server() -> Iterator[TwilioServer]:
    server = TwilioServer(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()
    yield server
    server.stop()


@pytest.fixture
def slack_server() -> Iterator[SlackServer]:
    server = SlackServer(bot_token=BOT_TOKEN).start()
    yield server
    server.stop()


@pytest.fixture
def mailgun_server() -> Iterator[MailgunServer]:
    server = MailgunServer(api_key=MAILGUN_KEY, domain=MAIL_DOMAIN).start()
    yield server
    server.stop()


def make_identity(channel: str, *, address: str, secrets: dict[str, str], sandbox: bool = False) -> Identity:
    # Sandbox identities exist only in simulation organizations (slug `<...>-sim`).
    organization = OrganizationFactory(slug=f"{OrganizationFactory.build().slug}-sim") if sandbox else (
        OrganizationFactory())
    return identities.create_identity(
        organization, channel=channel, address=address, display_name="Acme Billing",
        secret_values=secrets, sandbox=sandbox,
    )


@pytest.fixture
def twilio_secrets(twilio_server) -> dict[str, str]:
    return {"account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "api_base_url": twilio_server.url}


PAYLOADS = Path(__file__).resolve().parents[2] / "fixtures" / "payloads"


def load_payload(path: str, **values: str) -> dict:
    """A recorded provider payload; `{name}` placeholders (timestamps, signatures, keys) filled in."""
    text = (PAYLOADS / path).read_text()
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return json.loads(text)
