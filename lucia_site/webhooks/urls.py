"""Webhook URLs, mounted at /hooks/ (DESIGN §7). Twilio signs LUCIA_PUBLIC_URL + these paths.

The Mailgun paths are the ones anymail used (`mailgun/inbound/`, `mailgun/inbound_mime/`,
`mailgun/tracking/`), so provider configuration keeps working; the views are Lucia's, on the
webhook pipeline. No other ESP's view is mounted. The sandbox route answers only with DEBUG
on or LUCIA_SANDBOX_WEBHOOK set (views.Sandbox).
"""

from django.urls import path, re_path

from lucia_site.webhooks import views

urlpatterns = [
    re_path(r"^email/mailgun/inbound(?:_mime)?/$", views.MailgunInbound.as_view(), name="hooks-mailgun-inbound"),
    path("email/mailgun/tracking/", views.MailgunTracking.as_view(), name="hooks-mailgun-tracking"),
    path("twilio/sms/", views.TwilioSms.as_view(), name="hooks-twilio-sms"),
    path("twilio/status/", views.TwilioStatus.as_view(), name="hooks-twilio-status"),
    path("twilio/voice/", views.TwilioVoice.as_view(), name="hooks-twilio-voice"),
    path("slack/events/", views.SlackEvents.as_view(), name="hooks-slack-events"),
    path("slack/interactions/", views.SlackInteractions.as_view(), name="hooks-slack-interactions"),
    path("sandbox/", views.Sandbox.as_view(), name="hooks-sandbox"),
]
