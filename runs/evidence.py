"""`done_when` checks: a task is done only when its check passes on evidence the runtime holds.

Evidence is what arrived from outside, never what the model wrote: inbound
messages and call reports (episode payloads) and humans' answers to
escalations. A message counts only for the tasks of the contact who sent it
(runs.senders matches its sender to the run's contacts); a stranger in the
same thread proves nothing. An attachment counts only as stored bytes
(connectors.Attachment): non-empty, hashed, of the type its bytes show, never
as a description in a payload. `check` is pure; `gather` reads the evidence a
run has recorded.

The evidence mapping `check` takes:

    {"messages": [{"source": "episode:12", "kind": "reply" | "call", "text": "...", "from": "...",
                   "from_roles": ["vendor"],
                   "attachments": [{"attachment_id", "filename", "content_type" (sniffed), "size", "sha256",
                                    "stored", "text"}],
                   "fields": {"name": "value"}}],
     "human": [{"source": "escalation:3", "question": "...", "answer": "yes", "task_key": "..."}]}
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agents.config import patterns
from connectors import attachments
from runs import senders
from runs.models import Contact, Episode, EpisodeKind, EpisodeStatus, Escalation, EscalationStatus

# Answers a human gives to confirm; anything else (including silence) does not.
AFFIRMATIVE = re.compile(r"(?i)^\s*(yes|y|yeah|yep|confirm(ed)?|done|true|approved?|correct|it was (sent|received))\b")


@dataclass(frozen=True)
class EvidenceResult:
    """`passed` with `matched` (what satisfied the check) and `source` (where it came from), or why not."""

    passed: bool
    reason: str
    matched: dict[str, Any] = field(default_factory=dict)
    source: str = ""


def check(done_when: dict, *, evidence: dict, task_key: str = "", contact_role: str | None = None) -> EvidenceResult:
    """`contact_role`: the task's contact; only their messages count (None: any run contact's)."""
    kind = done_when.get("type")
    checker = _CHECKS.get(kind)
    if checker is None:
        return EvidenceResult(False, f"unknown done_when type {kind!r}")
    try:
        if kind == "human_confirmation":
            return checker(done_when, evidence, task_key)
        own = {**evidence, "messages": [m for m in evidence.get("messages") or [] if _from_contact(m, contact_role)]}
        result = checker(done_when, own, task_key)
    except patterns.PatternError as error:  # a version published before patterns were RE2-checked
        return EvidenceResult(False, f"the check's pattern cannot be used ({error}); fix it in a new version")
    strangers = len(evidence.get("messages") or []) - len(own["messages"])
    if not result.passed and strangers:
        who = f"the {contact_role} contact" if contact_role else "a contact of this run"
        return EvidenceResult(False, f"{result.reason} ({strangers} message(s) not from {who} do not count)")
    return result


def _from_contact(message: dict, role: str | None) -> bool:
    roles = message.get("from_roles") or []
    return role in roles if role is not None else bool(roles)


def _attachment_received(done_when: dict, evidence: dict, task_key: str) -> EvidenceResult:
    types = done_when.get("content_types") or []
    pattern = done_when.get("filename_pattern")
    refused: list[str] = []
    for message in _messages(evidence, "reply"):
        for attachment in message.get("attachments") or []:
            name = attachment.get("filename") or "attachment"
            problem = _unproven(attachment)
            if problem:
                refused.append(f"{name}: {problem}")
            elif not _content_type_ok(attachment.get("content_type", ""), types):
                refused.append(f"{name}: its bytes are {attachment.get('content_type') or 'of no known type'}")
            elif not _filename_ok(name, pattern):
                refused.append(f"{name}: the filename does not match {pattern}")
            else:
                matched = {key: attachment.get(key) for key in ("attachment_id", "filename", "content_type", "size",
                                                                 "sha256")}
                return EvidenceResult(True, "attachment received", matched, message.get("source", ""))
    if not refused:
        return EvidenceResult(False, "no attachment has been received; a message saying it was sent is not evidence")
    wanted = ", ".join(types) or "any type"
    return EvidenceResult(False, f"no received attachment matches ({wanted}, filename {pattern or 'any'}): "
                                 + "; ".join(refused[:5]))


def _unproven(attachment: dict) -> str:
    """Why the file is not proven to have arrived ('' when its bytes were stored, non-empty and hashed)."""
    if not attachment.get("stored"):
        return "its bytes never arrived"
    if not attachment.get("size"):
        return "the file is empty"
    if len(attachment.get("sha256") or "") != 64:
        return "the file has no checksum"
    return ""


def _reply_matches(done_when: dict, evidence: dict, task_key: str) -> EvidenceResult:
    pattern = patterns.compiled(done_when["pattern"])
    for message in _messages(evidence, "reply"):
        found = pattern.search(patterns.bounded(message.get("text") or ""))
        if found:
            return EvidenceResult(True, "reply matches", {"text": found.group(0)}, message.get("source", ""))
    return EvidenceResult(False, "no received reply matches the expected pattern")


def _field_extracted(done_when: dict, evidence: dict, task_key: str) -> EvidenceResult:
    name = done_when["field"]
    kind = {"reply": "reply", "call": "call"}.get(done_when.get("from", "reply"))
    pattern = patterns.compiled(done_when["pattern"]) if done_when.get("pattern") else None
    for message in _messages(evidence, kind):
        value = _extract(message, name, pattern)
        if value:
            return EvidenceResult(True, f"{name} extracted", {"field": name, "value": value}, message.get("source", ""))
    return EvidenceResult(False, f"no received {'message' if kind is None else kind} states a valid {name}")


def _human_confirmation(done_when: dict, evidence: dict, task_key: str) -> EvidenceResult:
    question = (done_when.get("question") or "").strip().casefold()
    for answer in evidence.get("human") or []:
        about_task = (task_key and answer.get("task_key") == task_key) or (
            question and (answer.get("question") or "").strip().casefold() == question
        )
        if about_task and AFFIRMATIVE.match(answer.get("answer") or ""):
            return EvidenceResult(True, "a human confirmed", {"answer": answer.get("answer")}, answer.get("source", ""))
    return EvidenceResult(False, "no human has confirmed this task yet")


_CHECKS = {
    "attachment_received": _attachment_received,
    "reply_matches": _reply_matches,
    "field_extracted": _field_extracted,
    "human_confirmation": _human_confirmation,
}


def _messages(evidence: dict, kind: str | None) -> list[dict]:
    return [m for m in evidence.get("messages") or [] if kind is None or m.get("kind") == kind]


def _content_type_ok(content_type: str, allowed: list[str]) -> bool:
    # Parameters (";charset=...") and case do not change what the file is.
    base = content_type.split(";")[0].strip().lower()
    return not allowed or any(base == a or (a.endswith("/*") and base.startswith(a[:-1])) for a in allowed)


def _filename_ok(filename: str, pattern: str | None) -> bool:
    return pattern is None or patterns.search(pattern, filename) is not None


def _extract(message: dict, name: str, pattern: patterns.Pattern | None) -> str:
    """The field's value from structured fields or the text; '' when absent or invalid."""
    value = str((message.get("fields") or {}).get(name) or "")
    # What a text extractor read from attachments counts as part of the message.
    extracted = [a.get("text") or "" for a in message.get("attachments") or []]
    text = patterns.bounded("\n".join([message.get("text") or "", *extracted]))
    if value:
        return value if pattern is None or pattern.search(patterns.bounded(value)) else ""
    if pattern is not None:
        found = pattern.search(text)
        if found is None:
            return ""
        return ((found.group(1) if found.groups() else None) or found.group(0)).strip()
    labelled = re.search(rf"(?im)^\s*{re.escape(name).replace('_', '[ _]')}\s*[:=]\s*(\S.*)$", text)
    return labelled.group(1).strip() if labelled else ""


# Reading what a run holds ---------------------------------------------------------------------------------------

_MESSAGE_KINDS = {EpisodeKind.INBOUND: "reply", EpisodeKind.CALL_REPORT: "call"}


def gather(run_id: int, *, current: Episode | None = None, checks: Iterable[str] | None = None,
           episodes: list[dict] | None = None, contacts: list[Contact] | None = None) -> dict:
    """The run's evidence: inbound/call episodes already processed (or being processed) and human answers.

    `checks` (done_when types) limits the reading to what those checks look at; None reads everything.
    `episodes` ({id, kind, status, payload}, by seq) and `contacts`: the run's, when the caller already read them
    (an episode's facts, runs.episode_facts).
    """
    wanted = set(_CHECKS) if checks is None else set(checks)
    messages: list[dict] = []
    if wanted - {"human_confirmation"}:
        settled = (EpisodeStatus.DONE, EpisodeStatus.RUNNING)
        if episodes is None:
            rows = list(Episode.objects.filter(run_id=run_id, kind__in=list(_MESSAGE_KINDS), status__in=settled)
                        .order_by("seq").values_list("pk", "kind", "payload"))
        else:
            # The current episode in its place by seq: the facts were read as it started (still `queued` there).
            rows = [(e["id"], e["kind"], e["payload"]) for e in episodes
                    if e["kind"] in _MESSAGE_KINDS
                    and (e["status"] in settled or (current is not None and e["id"] == current.pk))]
        if current is not None and current.kind in _MESSAGE_KINDS and all(pk != current.pk for pk, _, _ in rows):
            rows.append((current.pk, current.kind, current.payload))
        if contacts is None:
            contacts = list(Contact.objects.filter(run_id=run_id))
        contacts = [{"role": c.role, "email": c.email, "phone": c.phone, "slack_user": c.slack_user} for c in contacts]
        files = _files(run_id, [payload for _, _, payload in rows])
        messages = [_message(pk, kind, payload, contacts=contacts, files=files) for pk, kind, payload in rows]
    human: list[dict] = []
    if "human_confirmation" in wanted:
        answers = Escalation.objects.filter(
            run_id=run_id, status__in=[EscalationStatus.ANSWERED, EscalationStatus.RESOLVED]
        ).exclude(answer="")
        human = [
            {
                "source": f"escalation:{pk}",
                "question": prompt,
                "answer": answer,
                "task_key": (context or {}).get("task_key", ""),
            }
            for pk, prompt, answer, context in answers.order_by("pk").values_list("pk", "prompt", "answer", "context")
        ]
    return {"messages": messages, "human": human}


def _message(pk: int, kind: str, payload: dict | None, *, contacts: list[dict], files: dict[int, dict]) -> dict:
    payload = payload or {}
    sender = str(payload.get("from") or "")
    channel = payload.get("channel") or ("voice" if kind == EpisodeKind.CALL_REPORT else "")
    named = [entry.get("attachment_id") for entry in payload.get("attachments") or [] if isinstance(entry, dict)]
    return {
        "source": f"episode:{pk}",
        "kind": _MESSAGE_KINDS[kind],
        "text": payload.get("text") or payload.get("transcript") or "",
        # Only rows stored for this run; a payload entry without one (a description) is not a file.
        "attachments": [files[file_id] for file_id in named if file_id in files],
        "fields": payload.get("fields") or {},
        "from": sender,
        "from_roles": senders.roles_of(contacts, sender=sender, channel=channel),
    }


def _files(run_id: int, payloads: list[dict | None]) -> dict[int, dict]:
    """The stored attachments the payloads name, by id, as check reads them."""
    ids = [entry.get("attachment_id") for payload in payloads for entry in (payload or {}).get("attachments") or []
           if isinstance(entry, dict)]
    return {row.pk: {"attachment_id": row.pk, "filename": row.filename, "content_type": row.sniffed_type,
                     "size": row.size, "sha256": row.sha256, "stored": row.stored, "text": row.text}
            for row in attachments.for_run(run_id, ids)}
