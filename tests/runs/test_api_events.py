"""POST /api/v1/runs/{id}/events/: files only as bytes, checked like an email's, from a run contact only."""

import base64
import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from connectors.models import Attachment
from runs import loop
from runs.models import Episode, Task
from simulator import documents
from tests.factories import api_key_for
from tests.runs import loop_helpers as h

pytestmark = pytest.mark.django_db

REAL_PDF = documents.pdf_bytes(title="W-9, signed")


@pytest.fixture(autouse=True)
def _scripted(settings):
    settings.LUCIA_LLM = "scripted"


def _client(run) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {api_key_for(run.organization)}")
    return client


def _post(run, *, files: list[dict] | None = None, **fields):
    body = {"dedupe_key": "mail-1", "kind": "inbound", "channel": "email", "sender": h.VENDOR_EMAIL,
            "text": "Here it is"} | fields
    if files is not None:
        body["attachments"] = files
    return _client(run).post(f"/api/v1/runs/{run.pk}/events/", body, format="json")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _settle(run) -> Task:
    episode = Episode.objects.get(run=run, kind="inbound")
    loop.run_episode(h.context(run, episode, epoch=h.claim(run)))
    return Task.objects.get(run=run, key="collect_w9")


def _nothing_stored(run) -> bool:
    return not Episode.objects.filter(run=run).exists() and not Attachment.objects.exists()


def test_the_contacts_pdf_as_base64_is_stored_and_completes_the_task():
    run = h.make_run()
    response = _post(run, files=[{"filename": "w9-signed.pdf", "content_type": "application/pdf",
                                  "content_b64": _b64(REAL_PDF)}])

    assert response.status_code == 201, response.content
    stored = Attachment.objects.get(run_id=run.pk)
    assert (stored.stored, stored.sniffed_type, stored.size) == (True, "application/pdf", len(REAL_PDF))
    assert stored.sha256 == hashlib.sha256(REAL_PDF).hexdigest()
    task = _settle(run)
    assert task.status == "done"
    assert task.done_evidence["matched"]["attachment_id"] == stored.pk


def test_the_contacts_pdf_as_a_multipart_upload_completes_the_task():
    run = h.make_run()
    upload = SimpleUploadedFile("W9 Whitfield.pdf", REAL_PDF, content_type="application/pdf")
    response = _client(run).post(f"/api/v1/runs/{run.pk}/events/", {
        "dedupe_key": "upload-1", "kind": "inbound", "channel": "sms", "sender": "+1 (555) 555-0101",
        "text": "scan attached", "files": [upload]}, format="multipart")

    assert response.status_code == 201, response.content
    assert Attachment.objects.get(run_id=run.pk).filename == "W9 Whitfield.pdf"
    assert _settle(run).status == "done"


def test_metadata_without_bytes_is_a_400_and_stores_nothing():
    run = h.make_run()
    response = _post(run, files=[{"filename": "w9.pdf", "content_type": "application/pdf"}])

    assert response.status_code == 400
    assert "bytes are required" in str(response.json()["attachments"])
    assert _nothing_stored(run)


@pytest.mark.parametrize(("data", "problem"), [
    pytest.param(documents.png_bytes(), "the content is image/png, not the declared application/pdf", id="png"),
    pytest.param(b"I signed it, promise", "of no recognized type", id="text"),
    pytest.param(b"", "the file is empty", id="empty"),
])
def test_a_file_that_is_not_what_it_claims_is_a_400_and_stores_nothing(data, problem):
    run = h.make_run()
    response = _post(run, files=[{"filename": "w9.pdf", "content_type": "application/pdf", "content_b64": _b64(data)}])

    assert response.status_code == 400, response.content
    assert problem in response.json()["attachments[0]"][0]
    assert _nothing_stored(run)


def test_bad_base64_and_oversized_files_are_400s(settings):
    run = h.make_run()
    bad = _post(run, files=[{"filename": "w9.pdf", "content_b64": "%%%not base64"}])
    assert bad.status_code == 400 and "not valid base64" in str(bad.json())

    settings.LUCIA_ATTACHMENT_MAX_BYTES = 100
    large = _post(run, files=[{"filename": "w9.pdf", "content_b64": _b64(REAL_PDF)}])
    assert large.status_code == 400 and "larger than 100 bytes" in large.json()["attachments[0]"][0]
    assert _nothing_stored(run)


def test_a_json_body_over_the_upload_limit_is_a_400_pointing_to_multipart(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    run = h.make_run()
    response = _post(run, files=[{"filename": "w9.pdf", "content_b64": _b64(REAL_PDF + b" " * 1000)}])

    assert response.status_code == 400
    assert "multipart" in response.json()["attachments"][0]
    assert _nothing_stored(run)


def test_a_sender_who_is_not_a_run_contact_is_a_400_and_stores_nothing():
    run = h.make_run()
    response = _post(run, sender="mallory@elsewhere.example",
                     files=[{"filename": "w9.pdf", "content_b64": _b64(REAL_PDF)}])

    assert response.status_code == 400
    assert "'mallory@elsewhere.example' is not a contact of run" in response.json()["sender"][0]
    assert _nothing_stored(run)


def test_an_inbound_event_or_a_file_without_a_sender_is_a_400():
    run = h.make_run()
    assert "name who sent it" in _post(run, sender="").json()["sender"][0]
    with_file = _post(run, kind="event", sender="", files=[{"filename": "w9.pdf", "content_b64": _b64(REAL_PDF)}])
    assert with_file.status_code == 400 and "sender" in with_file.json()
    assert _nothing_stored(run)


def test_a_plain_event_needs_no_sender_and_a_claim_completes_nothing():
    run = h.make_run()
    response = _post(run, kind="event", sender="", text="vendor says they already sent it")
    assert response.status_code == 201
    claim = _post(run, dedupe_key="mail-2", text="I already sent it last week")
    assert claim.status_code == 201
    assert _settle(run).status == "open"


def test_a_repeated_dedupe_key_keeps_one_copy_of_the_file():
    run = h.make_run()
    files = [{"filename": "w9.pdf", "content_b64": _b64(REAL_PDF)}]
    assert _post(run, files=files).status_code == 201
    again = _post(run, files=files)

    assert again.status_code == 200
    assert Attachment.objects.filter(run_id=run.pk).count() == 1


def test_the_schema_documents_files_as_content_in_json_and_multipart(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    body = schema["paths"]["/api/v1/runs/{id}/events/"]["post"]["requestBody"]["content"]
    assert set(body) >= {"application/json", "multipart/form-data"}
    attachment = schema["components"]["schemas"]["EventAttachment"]
    assert "content_b64" in attachment["required"]
    upload = schema["components"]["schemas"]["EventUpload"]["properties"]["files"]
    assert upload["items"]["format"] == "binary"
    assert "sender" in schema["components"]["schemas"]["Event"]["properties"]
