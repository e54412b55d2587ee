"""Files that come with messages: their bytes checked and kept, or a record that they never arrived.

The one writer of connectors.Attachment. A file is stored only with its
bytes: non-empty, at most LUCIA_ATTACHMENT_MAX_BYTES, hashed (sha256) and
typed by its magic number (connectors.sniffing). Providers that hand over a
link instead of the bytes (Slack files, Twilio MMS media) get a row with
stored=False: fetching needs their credentials and is not done, so such a
file is shown to people but never satisfies a task.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Q

from connectors import sniffing
from connectors.models import Attachment, InboundMessage

FILENAME_MAX = 255
DECLARED_TYPE_MAX = 255
URL_MAX = 2000


@dataclass(frozen=True)
class Upload:
    """One file as it arrived: `content` None when only a link (or nothing usable) came."""

    filename: str
    content: bytes | None
    declared_type: str = ""
    url: str = ""
    # What a text extractor read from it (simulated personas only).
    text: str = ""
    # Why `content` is None although something was sent (bad base64).
    problem: str = ""


def max_bytes() -> int:
    return settings.LUCIA_ATTACHMENT_MAX_BYTES


def upload_from_item(item: dict[str, Any]) -> Upload:
    """The Upload a connector's parsed attachment entry describes ({filename, content_type, content_b64?, url?})."""
    encoded = item.get("content_b64")
    content, problem = None, ""
    if isinstance(encoded, str):
        try:
            content = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            problem = "content_b64 is not valid base64"
    return Upload(filename=str(item.get("filename") or ""), content=content,
                  declared_type=str(item.get("content_type") or ""), url=str(item.get("url") or ""),
                  text=str(item.get("text") or ""), problem=problem)


def refusal(upload: Upload) -> str:
    """Why the file cannot be kept as evidence ('' when it can): the events API answers 400 with it."""
    if upload.content is None:
        return upload.problem or "the file's bytes are missing; send the content, not a description of it"
    if not upload.content:
        return "the file is empty"
    if len(upload.content) > max_bytes():
        return f"the file is larger than {max_bytes()} bytes"
    declared = sniffing.base_type(upload.declared_type)
    actual = sniffing.sniff(upload.content)
    if declared in sniffing.KNOWN_TYPES and declared != actual:
        return f"the content is {_type_name(actual)}, not the declared {declared}"
    return ""


def store_for_message(message: InboundMessage, items: Iterable[dict[str, Any]]) -> list[Attachment]:
    """Keep the files of a newly stored inbound message (call in its transaction)."""
    rows = [_row(upload_from_item(item), organization_id=message.organization_id, inbound_message=message)
            for item in items if isinstance(item, dict)]
    return Attachment.objects.bulk_create(rows)


def store_for_run(run_id: int, *, organization_id: int | None, uploads: Sequence[Upload]) -> list[Attachment]:
    """Keep files given for a run directly (the events API, a simulated reply)."""
    rows = [_row(upload, organization_id=organization_id, run_id=run_id) for upload in uploads]
    return Attachment.objects.bulk_create(rows)


def follow_message(message: InboundMessage) -> int:
    """Give the message's files its organization, once routing has found it; returns rows changed.
    A message whose `attachments` lists none has no files (`store_for_message` keeps one row per entry)."""
    if not message.attachments:
        return 0
    return Attachment.objects.filter(inbound_message=message).exclude(
        organization_id=message.organization_id).update(organization_id=message.organization_id)


def metadata(items: Iterable[Any]) -> list[dict[str, Any]]:
    """A parsed attachment list without its content, for InboundMessage.attachments (bytes live in Attachment)."""
    return [{k: v for k, v in item.items() if k != "content_b64"} for item in items if isinstance(item, dict)]


def describe(attachment: Attachment) -> dict[str, Any]:
    """The entry an episode payload carries: what people and the model see; evidence re-reads the row."""
    return {
        "attachment_id": attachment.pk,
        "filename": attachment.filename,
        "content_type": attachment.sniffed_type if attachment.stored else attachment.declared_type,
        "declared_type": attachment.declared_type,
        "size": attachment.size,
        "sha256": attachment.sha256,
        "stored": attachment.stored,
        **({"not_stored_reason": attachment.not_stored_reason} if not attachment.stored else {}),
    }


def for_run(run_id: int, ids: Iterable[int]) -> list[Attachment]:
    """The rows among `ids` that belong to the run: given for it, or on an inbound message routed to it."""
    wanted = [pk for pk in ids if isinstance(pk, int)]
    if not wanted:
        return []
    return list(Attachment.objects.filter(pk__in=wanted).filter(
        Q(run_id=run_id) | Q(inbound_message__matched_run_id=run_id)
    ).defer("content"))


def _row(upload: Upload, **links: Any) -> Attachment:
    content = upload.content
    reason = ""
    if content is None:
        reason = upload.problem or ("only a link arrived; the bytes were not fetched" if upload.url
                                    else "no content arrived")
    elif len(content) > max_bytes():
        reason, content = f"larger than {max_bytes()} bytes", None
    stored = content is not None
    return Attachment(
        filename=_clean(_basename(upload.filename))[:FILENAME_MAX],
        declared_type=_clean(upload.declared_type)[:DECLARED_TYPE_MAX],
        sniffed_type=sniffing.sniff(content) if stored else "",
        size=len(content) if stored else 0,
        sha256=hashlib.sha256(content).hexdigest() if stored else "",
        content=content,
        stored=stored,
        not_stored_reason=reason,
        url=_clean(upload.url)[:URL_MAX],
        text=_clean(upload.text),
        **links,
    )


def _basename(filename: str) -> str:
    # A sender's path ("C:\\scans\\w9.pdf", "../w9.pdf") says nothing about the file.
    return filename.replace("\\", "/").rsplit("/", 1)[-1].strip()


def _clean(value: str) -> str:
    # PostgreSQL text refuses NUL.
    return value.replace("\x00", "")


def _type_name(content_type: str) -> str:
    return "of no recognized type" if content_type == sniffing.UNKNOWN else content_type
