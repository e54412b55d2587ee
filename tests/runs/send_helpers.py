"""Runs, identities and fake providers for ToolExecutor tests (real runs use the wall clock)."""

from __future__ import annotations

from agents.config.compiler import compile_config
from agents.config.validation import validate_source
from agents.models import Organization
from connectors import identities
from connectors.models import Identity
from runs import tools
from runs.llm.base import ToolCall
from runs.models import Episode, Run
from tests.factories import ContactFactory, OrganizationFactory, RunFactory, TaskFactory, plan_version
from tests.fakes.esp_server import MailgunServer
from tests.fakes.slack_server import SlackServer
from tests.fakes.twilio_server import TwilioServer
from tests.runs import loop_helpers as h

ACCOUNT_SID = "AC" + "7" * 32
AUTH_TOKEN = "twilio-auth-token"
OUR_NUMBER = "+15005550006"
VENDOR_NUMBER = "+15555550101"
MAILGUN_KEY = "key-mailgun-test"
MAIL_DOMAIN = "mg.acme.test"
SMS = {"to_role": "vendor", "body": "Hi Dana, could you send the signed W-9?"}
EMAIL = {"to_role": "vendor", "subject": "Your W-9", "body": "Could you send your W-9?"}


def open_plan(**compliance) -> dict:
    """The template plan with a send window open at every hour of every day (real runs use the wall clock)."""
    plan = h.template_plan()
    plan["followup"].update(business_days=list(range(7)), business_hours={"start": "00:00", "end": "24:00"})
    plan["compliance"].update(quiet_hours=None, **compliance)
    return plan


def real_run(plan: dict | None = None, *, organization: Organization | None = None) -> Run:
    """A non-simulated run with the vendor contact (email and phone) and the plan's tasks."""
    plan = plan or open_plan()
    run = RunFactory(organization=organization or OrganizationFactory(), version=plan_version(plan), plan=plan,
                     sim=False)
    ContactFactory(run=run, role="vendor", name="Dana Whitfield", email=h.VENDOR_EMAIL, phone="+1 555 555 0101",
                   timezone="America/Chicago")
    for task in plan["tasks"]:
        TaskFactory(run=run, key=task["key"], title=task["title"], required=task["required"])
    return run


def start_twilio() -> TwilioServer:
    return TwilioServer(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()


def start_mailgun() -> MailgunServer:
    return MailgunServer(api_key=MAILGUN_KEY, domain=MAIL_DOMAIN).start()


def sms_identity(organization: Organization, server: TwilioServer, *, sandbox: bool = False) -> Identity:
    return identities.create_identity(
        organization, channel="sms", address=OUR_NUMBER, display_name="Acme AP", sandbox=sandbox,
        secret_values={"account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "api_base_url": server.url},
    )


def email_identity(organization: Organization, server: MailgunServer) -> Identity:
    return identities.create_identity(
        organization, channel="email", address=f"ap@{MAIL_DOMAIN}", display_name="Acme AP",
        secret_values={"api_key": MAILGUN_KEY, "api_url": server.api_url},
    )


def dispatch(run: Run, episode: Episode, name: str, arguments: dict, *, epoch: int | None = None,
             session: tools.ToolSession | None = None, owner: str | None = None) -> tuple[dict, tools.ToolSession]:
    """One tool call through runs.tools, as the loop makes it (`owner`: the lease's, checked beside the epoch)."""
    epoch = epoch if epoch is not None else h.claim(run, **({"owner": owner} if owner else {}))
    session = session or tools.ToolSession()
    ctx = h.context(run, episode, epoch=epoch, owner=owner)
    return tools.dispatch(ctx, ToolCall(id="call-1", name=name, arguments=arguments), session=session), session


def creates(server: TwilioServer) -> int:
    """Create calls that reached the fake Twilio (accepted or not)."""
    return len(server.calls_to("/Messages.json", method="POST"))


BOT_TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret"
SLACK_TEAM = "T0ACME"
VENDOR_SLACK = "U0DANA"


def every_channel_plan() -> dict:
    """open_plan() for an agent that may reach the vendor by email, SMS, Slack and phone (all four tools)."""
    source = h.TEMPLATE.read_text().replace("[email, sms]", "[email, sms, slack, voice]").replace(
        "tools: [send_email, send_sms,", "tools: [send_email, send_sms, send_slack, place_call,")
    result = validate_source(source)
    assert result.ok, result.as_dict()
    compiled = compile_config(result.config)
    return {**open_plan(), **{key: compiled[key] for key in ("capabilities", "contacts", "tools")}}


def start_slack() -> SlackServer:
    return SlackServer(bot_token=BOT_TOKEN).start()


def slack_identity(organization: Organization, server: SlackServer) -> Identity:
    return identities.create_identity(
        organization, channel="slack", address=SLACK_TEAM, display_name="Acme AP",
        secret_values={"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "api_base_url": server.base_url},
    )


def voice_identity(organization: Organization, server: TwilioServer) -> Identity:
    return identities.create_identity(
        organization, channel="voice", address=OUR_NUMBER, display_name="Acme AP",
        secret_values={"account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "api_base_url": server.url},
    )
