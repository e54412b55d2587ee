"""Attachment bytes a persona sends: a real, minimal PDF (or PNG) built in code, no files on disk.

simulator.delivery hands the bytes to the webhook intake, which stores them as an
email's attachment; a done_when check then reads the stored row (size, sha256,
the type sniffed from the bytes, the filename) and `text` (what an extractor
would read). A persona declaring a type this module cannot build sends text
bytes, which no typed check accepts.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib

PDF_TYPE = "application/pdf"
PNG_TYPE = "image/png"


def attachment(*, filename: str, content_type: str = PDF_TYPE, text: str = "", title: str = "") -> dict:
    """The inbound payload entry for one file: {filename, content_type, size, sha256, content_b64[, text]}."""
    data = document_bytes(content_type=content_type, title=title or filename, text=text)
    entry = {
        "filename": filename,
        "content_type": content_type,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "content_b64": base64.b64encode(data).decode("ascii"),
    }
    if text:
        entry["text"] = text
    return entry


def document_bytes(*, content_type: str, title: str, text: str = "") -> bytes:
    base = content_type.split(";")[0].strip().lower()
    if base == PDF_TYPE:
        return pdf_bytes(title=title, lines=[line for line in text.splitlines() if line.strip()])
    if base == PNG_TYPE:
        return png_bytes()
    return (text or title).encode()


def pdf_bytes(*, title: str, lines: list[str] | None = None) -> bytes:
    """A one-page PDF 1.4 showing `title` and `lines` in Helvetica, with a correct xref table."""
    rows = [title, *(lines or [])]
    commands = ["BT", "/F1 14 Tf", "72 720 Td", "16 TL"]
    commands += [f"({_pdf_string(row)}) '" for row in rows]
    commands.append("ET")
    stream = "\n".join(commands).encode("latin-1", "replace")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref_at)
    return bytes(out)


def png_bytes() -> bytes:
    """A valid 1×1 white PNG (a scanned receipt stand-in)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\xff\xff")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _pdf_string(text: str) -> str:
    # Parentheses and backslashes delimit PDF strings; escape them.
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
