"""`python manage.py simulate <agent> [--organization SLUG] [--version N] [--case NAME | --all] [--weeks 6]
[--jobs N] [--json]`.

The agent is the template with that slug, or with --organization that
organization's own agent (simulated in its `<slug>-sim` shadow).

Runs the version's eval cases on the virtual clock and prints each case's
timeline and the scorecard table; with --json, only the scorecard dict goes
to stdout (each case with its `wall_seconds`). Exit code 0 when every case passed, 1 otherwise. `--all` (the
default) saves a Scorecard the publish gate reads; chosen cases are kept as a
Simulation only, since a subset proves nothing for publishing.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.models import Agent, AgentVersion, Organization
from simulator import report, scorecards


class Command(BaseCommand):
    help = "Simulate an agent version's eval cases (six virtual weeks in seconds) and print timelines and a scorecard."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs) -> CommandParser:
        # `--version N` picks the agent version (DESIGN §7), replacing Django's "print Django's version".
        return super().create_parser(prog_name, subcommand, conflict_handler="resolve", **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent", help="agent slug")
        parser.add_argument("--organization", metavar="SLUG", help="that organization's agent (default: the template)")
        parser.add_argument("--version", type=int, dest="number", help="version number (default: latest valid)")
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--case", action="append", dest="cases", metavar="NAME", help="run this case (repeatable)")
        which.add_argument("--all", action="store_true", help="run every case that counts (the default)")
        parser.add_argument("--weeks", type=int, help="virtual weeks per case (default: each case's own)")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--jobs", type=int, default=1, metavar="N",
                            help="simulate the cases in N processes, each in its own shadow organization (same "
                                 "results as one process for the same seed)")
        parser.add_argument("--json", action="store_true", help="print the scorecard as JSON, no progress bar")

    def handle(self, *args, **options) -> None:
        organization = None
        if options["organization"]:
            organization = Organization.objects.filter(slug=options["organization"]).first()
            if organization is None:
                raise CommandError(f"unknown organization {options['organization']!r}")
        version = pick_version(options["agent"], number=options["number"], organization=organization)
        if options["weeks"] is not None and options["weeks"] < 1:
            raise CommandError("--weeks must be at least 1")
        if options["jobs"] < 1:
            raise CommandError("--jobs must be at least 1")
        as_json = options["json"]
        bar = None if as_json else report.ProgressBar(self._write_err, redraw=self.stderr.isatty())
        try:
            cases = scorecards.select_cases(version, names=options["cases"])
            run_options = {"seed": options["seed"], "weeks": options["weeks"], "progress": bar,
                           "organization": organization, "jobs": options["jobs"]}
            if options["cases"] is None:
                card = scorecards.score(version, **run_options)
                results, scorecard = card.simulation.results, scorecards.as_dict(card)
            else:
                simulation = scorecards.run(version, cases=cases, **run_options)
                results, scorecard = simulation.results, unsaved_scorecard(version, simulation)
        except scorecards.SimulationError as error:
            raise CommandError(str(error)) from None
        finally:
            if bar is not None:
                bar.close()
        if as_json:
            self.stdout.write(json.dumps(scorecard, indent=2, default=str))
        else:
            self._print(results, scorecard)
        if not scorecard["passed"]:
            raise SystemExit(1)

    def _write_err(self, text: str) -> None:
        self.stderr.write(text, ending="")
        self.stderr.flush()

    def _print(self, results: list[dict], scorecard: dict) -> None:
        for result in results:
            for line in report.timeline(result):
                self.stdout.write(line)
            self.stdout.write("")
        for line in report.table(scorecard["cases"]):
            self.stdout.write(line)
        style = self.style.SUCCESS if scorecard["passed"] else self.style.ERROR
        self.stdout.write(style(report.verdict(scorecard)))


def pick_version(slug: str, *, number: int | None, organization: Organization | None = None) -> AgentVersion:
    """The agent's version `number`, or its latest valid one; CommandError names the valid choices.

    The agent is `organization`'s, or the template with that slug when `organization` is None.
    """
    agents = Agent.objects.filter(organization=organization)
    agent = agents.filter(slug=slug).first()
    if agent is None:
        known = ", ".join(agents.order_by("slug").values_list("slug", flat=True)) or "none (run seed)"
        owner = organization.slug if organization else "the templates"
        raise CommandError(f"unknown agent {slug!r} in {owner}; choose from: {known}")
    versions = AgentVersion.objects.filter(agent=agent).select_related("agent").order_by("-number")
    valid = [version for version in versions if version.is_valid]
    if number is None:
        if not valid:
            raise CommandError(f"{slug} has no valid version to simulate")
        return valid[0]
    chosen = next((version for version in versions if version.number == number), None)
    if chosen is None or not chosen.is_valid:
        numbers = ", ".join(str(version.number) for version in valid) or "none"
        problem = "has config errors" if chosen else "does not exist"
        raise CommandError(f"{slug} v{number} {problem}; valid versions: {numbers}")
    return chosen


def unsaved_scorecard(version: AgentVersion, simulation) -> dict:
    """A scorecard-shaped dict for chosen cases: same fields as a saved one, with no id."""
    summary = scorecards.build(simulation.results, weeks=simulation.weeks)
    return {"id": None, "simulation_id": simulation.pk, "agent": version.agent.slug, "version": version.number,
            "version_id": version.pk, "config_hash": version.config_hash, "seed": simulation.seed,
            "created_at": simulation.finished_at.isoformat(), **summary}
