"""Tasks and their `done_when` checks.

A task is done only when its check passes on evidence the runtime holds (an
inbound message, an attachment, a call transcript, a human's answer), never on
the model's word. The check is a tagged union on `type`:

- `attachment_received`: an inbound attachment whose content type is one of
  `content_types` (any when empty) and whose filename matches `filename_pattern`
  (any when unset).
- `reply_matches`: an inbound reply whose text matches `pattern`.
- `field_extracted`: a value for `field` was read from a reply (`from: reply`),
  a call transcript (`from: call`) or either (`from: any`); when `pattern` is
  set the value must match it, and its first group (or the whole match) is the
  value recorded.
- `human_confirmation`: a human answered yes to `question`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from agents.config.schema_base import Key, Regex, Strict, Text, fail


def _content_type(value: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]*/(?:\*|[a-z0-9][a-z0-9.+-]*)", value):
        raise fail(
            "content_type", f"{value!r} is not a content type", "write a lowercase MIME type like application/pdf"
        )
    return value


ContentType = Annotated[str, AfterValidator(_content_type)]


class AttachmentReceived(Strict):
    type: Literal["attachment_received"]
    content_types: list[ContentType] = []
    filename_pattern: Regex | None = None


class ReplyMatches(Strict):
    type: Literal["reply_matches"]
    pattern: Regex


class FieldExtracted(Strict):
    type: Literal["field_extracted"]
    field: Key
    pattern: Regex | None = None
    source: Literal["reply", "call", "any"] = Field("reply", alias="from")


class HumanConfirmation(Strict):
    type: Literal["human_confirmation"]
    question: Text


DoneWhen = Annotated[
    AttachmentReceived | ReplyMatches | FieldExtracted | HumanConfirmation,
    Field(discriminator="type"),
]
DONE_WHEN_TYPES = ("attachment_received", "reply_matches", "field_extracted", "human_confirmation")


class TaskSpec(Strict):
    """One goal of a run. `required` tasks must all be done for the run to complete."""

    key: Key
    title: Text
    contact_role: Key
    required: bool = True
    done_when: DoneWhen


class InputSpec(Strict):
    """A value a run is started with (an invoice number, an amount); templates cite it as {inputs.<key>}."""

    key: Key
    required: bool = True
    description: str = ""
