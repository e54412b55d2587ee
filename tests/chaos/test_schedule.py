"""The chaos run's fault plan: seeded, every enabled kind present, database restarts that never overlap."""

import random
from collections import Counter

import pytest

from chaos import schedule


def test_every_enabled_kind_is_planned_and_the_database_restarts_at_least_twice_without_overlap():
    faults = schedule.plan(random.Random(1), seconds=40, kinds=schedule.KINDS)

    assert {fault.kind for fault in faults} == set(schedule.KINDS)
    restarts = [fault for fault in faults if fault.kind == "db-restart"]
    assert len(restarts) >= 2 and {fault.mode for fault in restarts} == {"fast", "immediate"}
    assert all(first.at + first.hold_s < second.at for first, second in zip(restarts, restarts[1:], strict=False))
    assert all(0 < fault.at < 40 for fault in faults)


def test_the_same_seed_plans_the_same_faults():
    first = schedule.plan(random.Random(7), seconds=120, kinds=schedule.KINDS)
    assert schedule.plan(random.Random(7), seconds=120, kinds=schedule.KINDS) == first
    assert schedule.plan(random.Random(8), seconds=120, kinds=schedule.KINDS) != first


def test_only_the_chosen_kinds_are_planned_and_an_unknown_kind_is_refused():
    kinds = schedule.parse_kinds("crash, outage")
    assert {fault.kind for fault in schedule.plan(random.Random(1), seconds=60, kinds=kinds)} == {"crash", "outage"}
    assert schedule.parse_kinds("all") == schedule.KINDS
    with pytest.raises(ValueError, match="unknown fault kind.*kill-everything"):
        schedule.parse_kinds("crash,kill-everything")


def test_past_the_phase_only_a_kind_never_injected_stays_due_and_only_for_a_while():
    kill_busy, crash = schedule.Fault(at=10.0, kind="kill-busy"), schedule.Fault(at=12.0, kind="crash")
    injected = Counter({"crash": 1})

    def due(elapsed: float) -> list[schedule.Fault]:
        return schedule.still_due([kill_busy, crash], elapsed=elapsed, seconds=30, injected=injected)

    assert due(29.9) == [kill_busy, crash]  # within the phase: every fault
    assert due(30.0) == [kill_busy]  # past it: only the kind still owed
    assert due(30 * schedule.OVERTIME) == []  # and only for so long
