from django.apps import AppConfig
from django.conf import settings


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        # Registers the built-in answers to escalations (runs.answer_options): every process offers the same.
        from runs import answers, approvals  # noqa: F401

        # django-q2 hands off here when a worker process comes up: the cluster has booted.
        post_spawn.connect(_worker_spawned, dispatch_uid="runs.heartbeats.worker_ready")
        if settings.LUCIA_Q_LOCK_FREE_WAIT:
            from runs import qworkers

            qworkers.install()


def _worker_spawned(sender, **kwargs) -> None:
    from runs import heartbeats

    heartbeats.worker_ready()
