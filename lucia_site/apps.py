from django.apps import AppConfig


class LuciaSiteConfig(AppConfig):
    name = "lucia_site"
    verbose_name = "Lucia"

    def ready(self) -> None:
        from lucia_site import checks  # noqa: F401  (registers the system checks)

        # Connects the receivers of anymail's inbound/tracking signals (the /hooks/email/ views send them).
        from lucia_site.webhooks import email_signals  # noqa: F401
