"""`python manage.py bench [--sleeping N] [--runs N]`: the performance figures of DESIGN §9 as ratios.

Works in a throwaway `lucia_bench` database on the same server, dropped at the end.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from simulator import bench


class Command(BaseCommand):
    help = "Benchmark simulation speed, episode throughput and dispatch scaling; print ratios against baselines."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sleeping", type=int, default=100_000,
                            help="sleeping runs for the dispatch figure (the design's figure: 1000000)")
        parser.add_argument("--runs", type=int, default=200, help="episodes per throughput measurement")

    def handle(self, *args, **options) -> None:
        figures = bench.run(sleeping=max(options["sleeping"], 100), runs=max(options["runs"], 1),
                            say=self.stderr.write)
        self.stdout.write("")
        for line in bench.table(figures):
            self.stdout.write(line)
        missed = [figure.name for figure in figures if not figure.ok]
        if missed:
            self.stdout.write(self.style.WARNING(f"{len(missed)} figure(s) missed their target"))
