"""done_when checks pass on evidence from outside (inbound payloads, human answers), never on a claim.

The first part checks `evidence.check` on evidence mappings; the second stores
messages and files the way the webhooks and the events API do and checks what
`evidence.gather` reads back from PostgreSQL.
"""

from runs import evidence

PDF = {"attachment_id": 1, "filename": "W-9 Acme.pdf", "content_type": "application/pdf", "size": 18_223,
       "sha256": "ab" * 32, "stored": True}
W9 = {"type": "attachment_received", "content_types": ["application/pdf"], "filename_pattern": "(?i)w-?9"}


def _reply(text: str = "", *, attachments: list | None = None, kind: str = "reply", fields: dict | None = None,
           roles: tuple[str, ...] = ("vendor",)):
    return {"source": "episode:7", "kind": kind, "text": text, "attachments": attachments or [], "fields": fields or {},
            "from_roles": list(roles)}


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


def test_a_strangers_message_satisfies_no_check():
    stranger = _reply("Paid on 2025-03-04, W-9 attached", attachments=[PDF], roles=())
    for done_when in (W9, {"type": "reply_matches", "pattern": "(?i)paid"},
                      {"type": "field_extracted", "field": "payment_date", "pattern": r"\d{4}-\d{2}-\d{2}"}):
        result = evidence.check(done_when, evidence=_evidence(stranger), contact_role="vendor")
        assert not result.passed
        assert "not from the vendor contact" in result.reason


def test_only_the_tasks_own_contact_counts_when_the_run_has_several():
    from_the_buyer = _reply(attachments=[PDF], roles=("buyer",))
    assert not evidence.check(W9, evidence=_evidence(from_the_buyer), contact_role="vendor").passed
    assert evidence.check(W9, evidence=_evidence(from_the_buyer), contact_role="buyer").passed


def test_an_attachment_counts_only_as_stored_non_empty_hashed_bytes():
    never_arrived = {**PDF, "stored": False, "size": 0, "sha256": ""}
    empty = {**PDF, "size": 0}
    unhashed = {**PDF, "sha256": ""}
    for attachment, reason in ((never_arrived, "never arrived"), (empty, "empty"), (unhashed, "checksum")):
        result = evidence.check(W9, evidence=_evidence(_reply(attachments=[attachment])), contact_role="vendor")
        assert not result.passed
        assert reason in result.reason


def test_a_payload_description_without_a_stored_row_is_not_an_attachment():
    described = {"filename": "w9.pdf", "content_type": "application/pdf"}
    result = evidence.check(W9, evidence=_evidence(_reply(attachments=[described])))
    assert not result.passed


# Stored the way the webhooks store them, read back by gather, judged by the real loop -------------------------------

import base64  # noqa: E402
import hashlib  # noqa: E402

import pytest  # noqa: E402

from connectors import attachments as attachment_store  # noqa: E402
from connectors import inbound, message_ids  # noqa: E402
from connectors.base import ParsedInbound  # noqa: E402
from runs import inbound_routing, loop  # noqa: E402
from runs.models import Episode, EpisodeStatus, OutboxMessage, Task  # noqa: E402
from simulator import documents  # noqa: E402
from tests.runs import loop_helpers as h  # noqa: E402

REAL_PDF = documents.pdf_bytes(title="W-9, signed")


@pytest.fixture
def _scripted(settings):
    settings.LUCIA_LLM = "scripted"


def _emailed(run, *, sender: str, files: list[dict], provider_id: str = "<reply-1@mail.example>"):
    """A reply in the run's thread (to its reply-to address), stored and routed as the email webhook does."""
    item = ParsedInbound(provider_id=provider_id, from_address=sender,
                         to_address=message_ids.address_for_token(message_ids.reply_token(run.pk)),
                         subject="Re: W-9", text="Here it is, signed.", attachments=files)
    message, created = inbound.store(item, channel="email", organization=None)
    assert created
    episode = inbound_routing.deliver(message, organization=None)
    assert episode is not None, "the reply reached the run"
    return episode


def _file(data: bytes | None, *, filename: str = "w9-signed.pdf", url: str = "") -> dict:
    entry = {"filename": filename, "content_type": "application/pdf"}
    if data is not None:
        entry["content_b64"] = base64.b64encode(data).decode()
    if url:
        entry["url"] = url
    return entry


def _settle(run, episode) -> Task:
    loop.run_episode(h.context(run, episode, epoch=h.claim(run)))
    return Task.objects.get(run=run, key="collect_w9")


@pytest.mark.django_db
def test_the_contacts_emailed_pdf_completes_the_task(_scripted):
    run = h.make_run()
    episode = _emailed(run, sender="Dana@Whitfield-Supplies.example", files=[_file(REAL_PDF)])

    task = _settle(run, episode)

    assert task.status == "done"
    matched = task.done_evidence["matched"]
    assert matched["sha256"] == hashlib.sha256(REAL_PDF).hexdigest()
    assert (matched["content_type"], matched["size"]) == ("application/pdf", len(REAL_PDF))


@pytest.mark.django_db
@pytest.mark.parametrize(("sender", "files"), [
    pytest.param("mallory@elsewhere.example", [_file(REAL_PDF)], id="a-strangers-real-pdf"),
    pytest.param(h.VENDOR_EMAIL, [_file(None)], id="metadata-without-bytes"),
    pytest.param(h.VENDOR_EMAIL, [_file(None, url="https://files.example/w9.pdf")], id="a-link-only"),
    pytest.param(h.VENDOR_EMAIL, [_file(documents.png_bytes(), filename="w9.pdf")], id="png-renamed-pdf"),
    pytest.param(h.VENDOR_EMAIL, [_file(b"I signed it, promise", filename="w9.pdf")], id="text-renamed-pdf"),
    pytest.param(h.VENDOR_EMAIL, [_file(b"")], id="an-empty-file"),
])
def test_forged_or_missing_evidence_leaves_the_task_open(_scripted, sender, files):
    run = h.make_run()
    task = _settle(run, _emailed(run, sender=sender, files=files))

    assert task.status == "open"
    assert task.done_evidence in (None, {})
    # The model's side agrees: nobody is thanked for a document that did not arrive.
    bodies = [m.payload.get("body") or "" for m in OutboxMessage.objects.filter(run=run)]
    assert not any("received your W-9" in body for body in bodies)


@pytest.mark.django_db
def test_a_stranger_in_the_thread_does_not_complete_the_task_after_the_contact_has_written():
    run = h.make_run()
    first = _emailed(run, sender=h.VENDOR_EMAIL, files=[], provider_id="<vendor@mail.example>")
    Episode.objects.filter(pk=first.pk).update(status=EpisodeStatus.DONE)
    episode = _emailed(run, sender="cc-colleague@whitfield-supplies.example", files=[_file(REAL_PDF)],
                       provider_id="<colleague@mail.example>")

    held = evidence.gather(run.pk, current=episode)
    assert [m["from_roles"] for m in held["messages"]] == [["vendor"], []]
    assert not evidence.check(W9, evidence=held, contact_role="vendor").passed


@pytest.mark.django_db
def test_a_payload_naming_another_runs_stored_file_is_not_evidence():
    other = h.make_run()
    [theirs] = attachment_store.store_for_run(other.pk, organization_id=other.organization_id, uploads=[h.PDF])
    run = h.make_run()
    forged = {"channel": "email", "from": h.VENDOR_EMAIL, "text": "attached",
              "attachments": [attachment_store.describe(theirs)]}
    episode = h.add_episode(run, "inbound", forged)

    held = evidence.gather(run.pk, current=episode)

    assert held["messages"][0]["attachments"] == []
    assert not evidence.check(W9, evidence=held, contact_role="vendor").passed


@pytest.mark.django_db
def test_gather_reads_the_sniffed_type_not_the_declared_one():
    run = h.make_run()
    episode = h.inbound(run, "attached", files=[attachment_store.Upload(
        filename="w9.pdf", content=documents.png_bytes(), declared_type="application/pdf")])

    [message] = evidence.gather(run.pk, current=episode)["messages"]

    assert message["attachments"][0]["content_type"] == "image/png"
    result = evidence.check(W9, evidence={"messages": [message], "human": []}, contact_role="vendor")
    assert not result.passed and "image/png" in result.reason


@pytest.mark.django_db
def test_evidence_from_the_episode_s_facts_keeps_the_current_message_in_its_place():
    run = h.make_run()
    current = h.inbound(run, "First reply, being read now.")
    later = h.inbound(run, "A second reply, already read.")
    Episode.objects.filter(pk=later.pk).update(status=EpisodeStatus.DONE)
    # As the episode's start read them: the current one was still queued then.
    facts = [{"id": e.pk, "seq": e.seq, "kind": e.kind, "status": "queued" if e.pk == current.pk else "done",
              "payload": e.payload} for e in (current, later)]

    from_facts = evidence.gather(run.pk, current=current, episodes=facts, contacts=list(run.contacts.all()))

    assert [m["source"] for m in from_facts["messages"]] == [f"episode:{current.pk}", f"episode:{later.pk}"]
