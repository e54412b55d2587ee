from django.apps import AppConfig
from django.conf import settings


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        if settings.LUCIA_Q_LOCK_FREE_WAIT:
            from runs import qworkers

            qworkers.install()
