"""Events handed to a run directly rather than through a provider's webhook: the events API, simulated replies.

A message (kind `inbound`) or anything carrying files must name a sender who
is one of the run's contacts (runs.senders). Files come as bytes and are kept
by connectors.attachments before the episode names them, so evidence reads
them exactly as it reads an email's. `strict` (the API) refuses a file that
could never count — no bytes, empty, too large, bytes that contradict the
declared type — with a message for the caller; the simulator stores whatever
a persona sends and leaves the verdict to runs.evidence. Nothing is stored
for a refused event, an ended run or a repeated dedupe key.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from connectors import attachments
from runs import events, senders
from runs.models import Episode, EpisodeKind, Run

# Episode kinds that are a contact speaking: they count as evidence, so they need a sender.
MESSAGE_KINDS = (EpisodeKind.INBOUND, EpisodeKind.CALL_REPORT)


class Refused(Exception):
    """The event cannot be recorded as given; `field` names the part at fault (the API's 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class _Duplicate(Exception):
    """Rolls back the files of an event whose dedupe key was already recorded."""


def record(
    run: Run, *, kind: str, dedupe_key: str, sender: str = "", channel: str = "", text: str = "",
    files: Sequence[attachments.Upload] = (), extra: dict | None = None, strict: bool = True,
    files_field: str = "attachments",
) -> Episode | None:
    """Record the event; the new Episode, or None when `dedupe_key` was already recorded.

    Raises Refused (nothing stored) or events.RunEnded (nothing stored).
    """
    sender = sender.strip()
    if strict:
        check_sender(run, kind=kind, sender=sender, channel=channel, has_files=bool(files))
        for index, upload in enumerate(files):
            problem = attachments.refusal(upload)
            if problem:
                raise Refused(f"{files_field}[{index}]", f"{upload.filename or 'file'}: {problem}")
    try:
        with transaction.atomic():
            stored = attachments.store_for_run(run.pk, organization_id=run.organization_id, uploads=files)
            payload = {**(extra or {}), "channel": channel, "text": text, "from": sender,
                       "attachments": [attachments.describe(row) for row in stored]}
            episode = events.record_event(run, kind=kind, payload=payload, dedupe_key=dedupe_key)
            if episode is None:
                raise _Duplicate
    except _Duplicate:
        return None
    return episode


def check_sender(run: Run, *, kind: str, sender: str, channel: str, has_files: bool) -> None:
    """A message or a file must come from one of the run's contacts; other events may name one."""
    if not sender:
        if kind in MESSAGE_KINDS or has_files:
            raise Refused("sender", "name who sent it: the email address, phone number or Slack user id of one "
                                    "of the run's contacts")
        return
    if not senders.roles_of(run.contacts.all(), sender=sender, channel=channel):
        raise Refused("sender", f"{sender!r} is not a contact of run {run.pk}; only the run's contacts can "
                                "send it messages or files")
