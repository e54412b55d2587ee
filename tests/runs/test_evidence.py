"""done_when checks pass on evidence from outside (inbound payloads, human answers), never on a claim."""

from runs import evidence

PDF = {"filename": "W-9 Acme.pdf", "content_type": "application/pdf", "size": 18_223, "sha256": "ab" * 32}
W9 = {"type": "attachment_received", "content_types": ["application/pdf"], "filename_pattern": "(?i)w-?9"}


def _reply(text: str = "", *, attachments: list | None = None, kind: str = "reply", fields: dict | None = None):
    return {"source": "episode:7", "kind": kind, "text": text, "attachments": attachments or [], "fields": fields or {}}


def _evidence(*messages: dict, human: list | None = None) -> dict:
    return {"messages": list(messages), "human": human or []}


def test_attachment_received_passes_on_matching_pdf():
    result = evidence.check(W9, evidence=_evidence(_reply("here it is", attachments=[PDF])))
    assert result.passed
    assert result.matched["filename"] == "W-9 Acme.pdf"
    assert result.matched["sha256"] == PDF["sha256"]
    assert result.source == "episode:7"


def test_a_claim_without_attachment_is_not_evidence():
    result = evidence.check(W9, evidence=_evidence(_reply("I already sent it last week")))
    assert not result.passed
    assert "not evidence" in result.reason


def test_attachment_of_wrong_type_or_name_fails():
    png = {**PDF, "content_type": "image/png"}
    invoice = {**PDF, "filename": "invoice.pdf"}
    assert not evidence.check(W9, evidence=_evidence(_reply(attachments=[png]))).passed
    assert not evidence.check(W9, evidence=_evidence(_reply(attachments=[invoice]))).passed


def test_content_type_parameters_and_wildcards_match():
    with_charset = {**PDF, "content_type": "Application/PDF; name=w9.pdf"}
    assert evidence.check(W9, evidence=_evidence(_reply(attachments=[with_charset]))).passed
    wildcard = {"type": "attachment_received", "content_types": ["image/*"]}
    jpeg = {**PDF, "content_type": "image/jpeg"}
    assert evidence.check(wildcard, evidence=_evidence(_reply(attachments=[jpeg]))).passed
    assert not evidence.check(wildcard, evidence=_evidence(_reply(attachments=[PDF]))).passed


def test_attachment_in_a_call_report_does_not_count_as_a_reply():
    result = evidence.check(W9, evidence=_evidence(_reply(attachments=[PDF], kind="call")))
    assert not result.passed


def test_reply_matches():
    done_when = {"type": "reply_matches", "pattern": r"(?i)\bpaid on \d{4}-\d{2}-\d{2}"}
    passed = evidence.check(done_when, evidence=_evidence(_reply("Hi, we Paid on 2025-03-04. Thanks")))
    assert passed.passed
    assert passed.matched == {"text": "Paid on 2025-03-04"}
    assert not evidence.check(done_when, evidence=_evidence(_reply("we paid it already"))).passed


def test_field_extracted_from_reply_text_with_group():
    done_when = {"type": "field_extracted", "field": "tracking_number", "pattern": r"\b(1Z[0-9A-Z]{16})\b",
                 "from": "reply"}
    result = evidence.check(done_when, evidence=_evidence(_reply("Tracking: 1Z999AA10123456784 via UPS")))
    assert result.passed
    assert result.matched == {"field": "tracking_number", "value": "1Z999AA10123456784"}
    assert not evidence.check(done_when, evidence=_evidence(_reply("it shipped yesterday"))).passed


def test_field_extracted_validates_structured_fields_and_respects_source():
    done_when = {"type": "field_extracted", "field": "po_number", "pattern": r"^PO-\d{5}$", "from": "call"}
    call = _reply("", kind="call", fields={"po_number": "PO-12345"})
    assert evidence.check(done_when, evidence=_evidence(call)).passed
    bad = _reply("", kind="call", fields={"po_number": "twelve"})
    assert not evidence.check(done_when, evidence=_evidence(bad)).passed
    # from: call ignores an email reply carrying the same value.
    assert not evidence.check(done_when, evidence=_evidence(_reply(fields={"po_number": "PO-12345"}))).passed


def test_field_extracted_without_pattern_reads_a_labelled_line():
    done_when = {"type": "field_extracted", "field": "due_date", "from": "any"}
    assert evidence.check(done_when, evidence=_evidence(_reply("Hello\nDue date: March 3\nBye"))).passed
    assert not evidence.check(done_when, evidence=_evidence(_reply("I will tell you the due date soon"))).passed


def test_human_confirmation_needs_an_affirmative_answer_about_this_task():
    done_when = {"type": "human_confirmation", "question": "Did the vendor sign the contract?"}
    yes = {"source": "escalation:3", "question": "Did the vendor sign the contract?", "answer": "Yes", "task_key": ""}
    no = {**yes, "answer": "No, not yet"}
    other = {**yes, "question": "Should I call them?"}
    by_task = {**other, "task_key": "contract"}
    assert evidence.check(done_when, evidence=_evidence(human=[yes]), task_key="contract").passed
    assert not evidence.check(done_when, evidence=_evidence(human=[no]), task_key="contract").passed
    assert not evidence.check(done_when, evidence=_evidence(human=[other]), task_key="contract").passed
    assert evidence.check(done_when, evidence=_evidence(human=[by_task]), task_key="contract").passed
    # A reply saying "yes" is not a human confirmation.
    assert not evidence.check(done_when, evidence=_evidence(_reply("yes")), task_key="contract").passed


def test_unknown_type_fails_without_raising():
    result = evidence.check({"type": "vibes"}, evidence=_evidence())
    assert not result.passed
    assert "unknown" in result.reason
