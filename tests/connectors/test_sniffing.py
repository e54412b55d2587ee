"""A file's type comes from its first bytes, never from its name or declared type."""

import pytest

from connectors import sniffing
from simulator import documents


@pytest.mark.parametrize(("data", "expected"), [
    (documents.pdf_bytes(title="W-9"), "application/pdf"),
    (documents.png_bytes(), "image/png"),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00", "image/jpeg"),
    (b"GIF89a\x01\x00\x01\x00", "image/gif"),
    (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image/webp"),
    (b"I signed it, promise", sniffing.UNKNOWN),
    (b" %PDF-1.4 with a leading space", sniffing.UNKNOWN),
    (b"", sniffing.UNKNOWN),
])
def test_sniff_reads_the_magic_number(data, expected):
    assert sniffing.sniff(data) == expected


def test_every_sniffable_type_is_known_and_templates_ask_only_for_known_types():
    from pathlib import Path

    import yaml

    templates = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
    wanted = {kind for path in templates.glob("*.yaml") for task in yaml.safe_load(path.read_text())["tasks"]
              for kind in (task["done_when"].get("content_types") or [])}
    assert wanted and wanted <= sniffing.KNOWN_TYPES


def test_base_type_drops_parameters_and_case():
    assert sniffing.base_type("Application/PDF; name=w9.pdf") == "application/pdf"
