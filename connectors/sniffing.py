"""What a file is, read from its first bytes: the only content type an evidence check trusts.

A sender's declared type and filename are claims; the magic number is not.
The table covers what task templates accept (PDF, PNG, JPEG) and the image
formats phones send; anything else is `UNKNOWN` and never passes a typed check.
"""

from __future__ import annotations

UNKNOWN = "application/octet-stream"

# (prefix, content type); checked in order, first match wins.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

KNOWN_TYPES = frozenset({content_type for _, content_type in _SIGNATURES} | {"image/webp"})


def sniff(data: bytes) -> str:
    """The content type the bytes prove, or UNKNOWN (also for empty data)."""
    for prefix, content_type in _SIGNATURES:
        if data.startswith(prefix):
            return content_type
    # WebP: a RIFF container whose form type (bytes 8-12) is WEBP.
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return UNKNOWN


def base_type(content_type: str) -> str:
    """The type without parameters, lower-cased: "Application/PDF; name=x" -> "application/pdf"."""
    return content_type.split(";")[0].strip().lower()
