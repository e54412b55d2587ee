# The connector tests' URL settings (autouse) and provider fakes apply to the webhook tests too.
from tests.connectors.conftest import _lucia_urls, mailgun_server, slack_server, twilio_server  # noqa: F401
