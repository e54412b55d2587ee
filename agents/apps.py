from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"

    def ready(self) -> None:
        # Django's own hand-off after `migrate` (and after a test flush): permissions added by any migration
        # reach the Studio's roles without another data migration.
        post_migrate.connect(_ensure_roles, sender=self, dispatch_uid="agents.roles.ensure_roles")


def _ensure_roles(sender, using: str = "default", **kwargs) -> None:
    from agents import roles

    roles.ensure_roles()
