"""connectors.attachments keeps a file's bytes or records that they never arrived; nothing else is a file."""

import base64
import hashlib

import pytest

from connectors import attachments, inbound
from connectors.base import ParsedInbound
from connectors.models import Attachment
from simulator import documents
from tests.factories import OrganizationFactory

pytestmark = pytest.mark.django_db

PDF = documents.pdf_bytes(title="W-9")


def _stored(*items: dict) -> list[Attachment]:
    message, created = inbound.store(ParsedInbound(provider_id="<m1@mail.example>", from_address="a@b.example",
                                                   attachments=list(items)), channel="email", organization=None)
    assert created
    return list(message.files.order_by("pk"))


def test_an_emailed_file_is_kept_with_its_hash_size_and_sniffed_type_and_not_in_the_messages_json():
    [row] = _stored({"filename": "w9.pdf", "content_type": "application/pdf",
                     "content_b64": base64.b64encode(PDF).decode()})

    assert (row.stored, bytes(row.content), row.size) == (True, PDF, len(PDF))
    assert (row.sha256, row.sniffed_type) == (hashlib.sha256(PDF).hexdigest(), "application/pdf")
    assert "content_b64" not in row.inbound_message.attachments[0]


def test_a_link_without_bytes_is_recorded_as_not_stored():
    [row] = _stored({"filename": "IMG_1.jpg", "content_type": "image/jpeg", "url": "https://api.twilio.example/m/1"})

    assert (row.stored, row.content, row.size, row.sha256, row.sniffed_type) == (False, None, 0, "", "")
    assert "not fetched" in row.not_stored_reason
    assert attachments.describe(row)["stored"] is False


def test_bad_base64_and_files_over_the_cap_keep_no_bytes(settings):
    settings.LUCIA_ATTACHMENT_MAX_BYTES = 64
    bad, large = _stored({"filename": "a.pdf", "content_b64": "@@@"},
                         {"filename": "b.pdf", "content_b64": base64.b64encode(PDF).decode()})

    assert (bad.stored, bad.not_stored_reason) == (False, "content_b64 is not valid base64")
    assert (large.stored, large.content, large.not_stored_reason) == (False, None, "larger than 64 bytes")


def test_a_senders_path_and_nul_bytes_do_not_reach_the_filename():
    [row] = _stored({"filename": "C:\\scans\\..\\w9\x00.pdf", "content_b64": base64.b64encode(PDF).decode()})
    assert row.filename == "w9.pdf"


def test_refusal_names_what_is_wrong_with_an_upload(settings):
    def upload(content, declared="application/pdf"):
        return attachments.Upload(filename="w9.pdf", content=content, declared_type=declared)

    assert attachments.refusal(upload(PDF)) == ""
    assert "bytes are missing" in attachments.refusal(upload(None))
    assert attachments.refusal(upload(b"")) == "the file is empty"
    assert "image/png, not the declared application/pdf" in attachments.refusal(upload(documents.png_bytes()))
    # A type outside the sniffing table is not contradicted, but it is stored as of unknown type.
    assert attachments.refusal(upload(b"a,b\n1,2\n", declared="text/csv")) == ""
    settings.LUCIA_ATTACHMENT_MAX_BYTES = 10
    assert "larger than 10 bytes" in attachments.refusal(upload(PDF))


def test_for_run_reads_only_the_runs_own_files():
    [mine] = attachments.store_for_run(1, organization_id=None, uploads=[attachments.Upload("w9.pdf", PDF)])
    [theirs] = attachments.store_for_run(2, organization_id=None, uploads=[attachments.Upload("w9.pdf", PDF)])

    assert [row.pk for row in attachments.for_run(1, [mine.pk, theirs.pk, "7"])] == [mine.pk]


def test_files_follow_their_message_to_the_organization_routing_found():
    organization = OrganizationFactory()
    [row] = _stored({"filename": "w9.pdf", "content_b64": base64.b64encode(PDF).decode()})
    assert row.organization_id is None

    inbound.mark_unmatched(row.inbound_message, organization_id=organization.pk)

    row.refresh_from_db()
    assert row.organization_id == organization.pk
