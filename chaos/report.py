"""The table a chaos run ends with: faults injected (counts) and invariants held."""

from __future__ import annotations

from collections import Counter

from chaos.cluster import WorkerCommand
from chaos.invariants import Check
from chaos.observe import Progress
from chaos.schedule import KINDS


def table(*, checks: list[Check], injected: Counter, notes: Counter, totals: Progress,
          commands: list[WorkerCommand], seconds: float, seed: int) -> str:
    launches = sum(command.launches for command in commands)
    exits = sum(command.unexpected_exits for command in commands)
    lines = [
        "",
        f"chaos run: seed {seed}, {seconds:.0f} s, {totals.runs} runs, {totals.episodes_finished} episodes finished,"
        f" {totals.sent} sends sent, {totals.uncertain} uncertain",
        f"worker commands: {len(commands)} ({' '.join(commands[0].argv[1:]) if commands else '-'}),"
        f" {launches} launches, {exits} exited on their own",
        "",
        f"{'fault':<34} {'injected':>8}",
        f"{'-' * 34} {'-' * 8}",
    ]
    lines += [f"{kind:<34} {injected.get(kind, 0):>8}" for kind in KINDS]
    lines += [f"  {note:<32} {count:>8}" for note, count in sorted(notes.items())]
    lines += ["", f"{'invariant':<62} {'held':<4}  detail", f"{'-' * 62} {'-' * 4}  {'-' * 6}"]
    lines += [f"{check.name:<62} {'yes' if check.held else 'NO':<4}  {check.detail}" for check in checks]
    failed = sum(not check.held for check in checks)
    lines += ["", "all invariants held" if not failed else f"{failed} invariant(s) violated"]
    return "\n".join(lines)
