from django.apps import AppConfig


class ConnectorsConfig(AppConfig):
    name = "connectors"
    verbose_name = "Connectors"

    def ready(self) -> None:
        # Connects the receivers of anymail's inbound/tracking signals (the /hooks/email/ views send them).
        from connectors.webhooks import email_signals  # noqa: F401
