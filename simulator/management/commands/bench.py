"""`python manage.py bench [--only PART ...] [--sleeping N] [--runs N] [--burst N]`: performance figures as ratios.

Works in a throwaway `lucia_bench` database on the same server, dropped at the end.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from simulator import bench


class Command(BaseCommand):
    help = ("Benchmark simulation speed, episode throughput, queries per episode, the 09:00 burst and dispatch "
            "scaling; print ratios against baselines measured in the same run.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sleeping", type=int, default=1_000_000,
                            help="sleeping runs for the dispatch figure (against 100)")
        parser.add_argument("--runs", type=int, default=200,
                            help="start episodes per worker process in the throughput figures")
        parser.add_argument("--only", nargs="+", choices=bench.PARTS, default=list(bench.PARTS), metavar="PART",
                            help=f"measure only these parts: {', '.join(bench.PARTS)} (default: all)")
        parser.add_argument("--burst", type=int, default=10_000,
                            help="runs due at once in the 09:00 burst, drained by two worker processes")

    def handle(self, *args, **options) -> None:
        figures = bench.run(sleeping=max(options["sleeping"], 100), runs=max(options["runs"], 1),
                            burst=max(options["burst"], 1), parts=tuple(options["only"]), say=self.stderr.write)
        self.stdout.write("")
        for line in bench.table(figures):
            self.stdout.write(line)
        missed = [figure.name for figure in figures if figure.ok is False]  # None: a figure only reported
        if missed:
            self.stdout.write(self.style.WARNING(f"{len(missed)} figure(s) missed their target"))
