"""Webhook URLs, mounted at /hooks/ (DESIGN §7). Twilio signs LUCIA_PUBLIC_URL + these paths."""

from anymail import urls as anymail_urls
from django.urls import include, path

from lucia_site.webhooks import views

# Only Mailgun's two views from anymail: the other providers' views would accept unsigned posts
# (anymail only warns when their basic auth is unset). They verify Mailgun's signature themselves
# (400 on a bad one) and hand events to lucia_site.webhooks.email_signals.
MAILGUN_VIEWS = ("mailgun_inbound_webhook", "mailgun_tracking_webhook")
anymail_patterns = [pattern for pattern in anymail_urls.urlpatterns if pattern.name in MAILGUN_VIEWS]

urlpatterns = [
    path("email/", include((anymail_patterns, "anymail"))),
    path("twilio/sms/", views.twilio_sms, name="hooks-twilio-sms"),
    path("twilio/status/", views.twilio_status, name="hooks-twilio-status"),
    path("twilio/voice/", views.twilio_voice, name="hooks-twilio-voice"),
    path("slack/events/", views.slack_events, name="hooks-slack-events"),
    path("sandbox/", views.sandbox, name="hooks-sandbox"),
]
