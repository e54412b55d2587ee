"""Runtime tables: runs, contacts, tasks, episodes, journal, outbox, escalations, cluster heartbeats."""

from runs.models.episode import Episode, EpisodeKind, EpisodeStatus
from runs.models.escalation import Escalation, EscalationKind, EscalationRoute, EscalationStatus
from runs.models.heartbeat import ClusterHeartbeat
from runs.models.journal import JournalEntry, JournalKind
from runs.models.outbox import OutboxMessage, OutboxStatus
from runs.models.run import (
    ENDED_RUN_STATUSES,
    OPEN_RUN_STATUSES,
    Contact,
    Run,
    RunStatus,
    Task,
    TaskStatus,
)

__all__ = [
    "ENDED_RUN_STATUSES", "OPEN_RUN_STATUSES", "ClusterHeartbeat", "Contact", "Episode", "EpisodeKind", "EpisodeStatus",
    "Escalation", "EscalationKind", "EscalationRoute", "EscalationStatus", "JournalEntry", "JournalKind",
    "OutboxMessage", "OutboxStatus", "Run", "RunStatus", "Task", "TaskStatus",
]
