from django.apps import AppConfig


class LuciaSiteConfig(AppConfig):
    name = "lucia_site"
    verbose_name = "Lucia"

    def ready(self) -> None:
        from lucia_site import checks  # noqa: F401  (registers the system checks)
        from lucia_site.webhooks import checks as webhook_checks  # noqa: F401

