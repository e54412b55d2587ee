"""Fault injection for the chaos suite: end the process at a named point, as SIGKILL would.

`point("after_provider_call")` does nothing unless settings.LUCIA_FAULTS
(env LUCIA_FAULTS, comma separated) names it. A named point ends the process
at once with os._exit(137): no `finally`, no atexit, no rollback of what was
already committed, exactly what a killed worker leaves behind. `name:once`
fires only the first time across processes: a marker file under
LUCIA_FAULTS_DIR records that it fired, so a restarted worker runs through.

Points (runs/tool_executor.py): before_provider_call, after_provider_call
(the connector returned, nothing recorded yet), after_record.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

KILLED_EXIT_CODE = 137  # 128 + SIGKILL, what a supervisor reports for a killed process
POINTS = ("before_provider_call", "after_provider_call", "after_record")


def point(name: str) -> None:
    """End the process here when LUCIA_FAULTS names this point; otherwise return (one list lookup)."""
    faults = settings.LUCIA_FAULTS
    if not faults:
        return
    for fault in faults:
        fault_name, _, mode = fault.strip().partition(":")
        if fault_name != name:
            continue
        if mode == "once" and not _first_time(name):
            return
        os._exit(KILLED_EXIT_CODE)


def _first_time(name: str) -> bool:
    """True once per marker directory: O_EXCL makes two processes racing for the marker agree."""
    directory = settings.LUCIA_FAULTS_DIR
    if not directory:
        raise RuntimeError(f"LUCIA_FAULTS names {name}:once but LUCIA_FAULTS_DIR is not set")
    marker = Path(directory) / f"{name}.fired"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True
