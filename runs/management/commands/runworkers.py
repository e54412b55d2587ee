"""`python manage.py runworkers`: run a django-q2 cluster under a supervisor (runs.supervisor)."""

import signal
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand

from runs import supervisor


class Command(BaseCommand):
    help = ("Run `manage.py qcluster` as a child, restart it when it exits or stops making progress, "
            "and dispatch due episodes every LUCIA_DISPATCH_INTERVAL seconds.")

    def add_arguments(self, parser):
        parser.add_argument("--stall-after", type=int, default=None, metavar="SECONDS",
                            help="restart a cluster with queued work and no progress for this long "
                                 "(default: LUCIA_WORKER_STALL_AFTER)")
        parser.add_argument("--check-every", type=int, default=None, metavar="SECONDS",
                            help="how often to check progress (default: LUCIA_WORKER_CHECK_EVERY)")
        parser.add_argument("--name", default=None,
                            help="the cluster's name in the heartbeat table (default: host:pid)")

    def handle(self, *args, **options):
        runner = supervisor.Supervisor(
            cluster=options["name"] or supervisor.default_cluster_name(),
            stall_after=timedelta(seconds=options["stall_after"] or settings.LUCIA_WORKER_STALL_AFTER),
            check_every=options["check_every"] or settings.LUCIA_WORKER_CHECK_EVERY,
            dispatch_every=settings.LUCIA_DISPATCH_INTERVAL,
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: runner.stop.set())
        runner.run()
