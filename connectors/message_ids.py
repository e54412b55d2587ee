"""Deterministic email identifiers: Message-IDs from idempotency keys, reply-to tokens from run ids.

A reply finds its run either by the reply-to address (`reply+<run id>-<mac>@domain`,
the mac an HMAC of the run id, so nobody can forge an address for another run) or
by In-Reply-To/References naming one of our Message-IDs.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re

from django.conf import settings
from django.utils.crypto import constant_time_compare
from django.utils.encoding import force_bytes

REPLY_PREFIX = "reply+"
# The salt that makes the mac's key this purpose's own (salted_hmac's key_salt; changing it orphans every address sent).
MAC_PURPOSE = "lucia.connectors.reply_token"
MAC_LENGTH = 16
# The first 32 hex chars of the sha256 idempotency key: 128 bits, unique enough, short enough for a header.
MESSAGE_ID_KEY_LENGTH = 32
_TOKEN = re.compile(r"^(?P<run>[0-9]+)-(?P<mac>[a-z2-7]+)$")
_MESSAGE_ID = re.compile(r"<?(?P<local>[^<>@\s]+)@(?P<domain>[^<>@\s]+)>?")


def _mac(run_id: int) -> str:
    return _mac_with(run_id, settings.SECRET_KEY)


@functools.lru_cache(maxsize=4096)
def _mac_with(run_id: int, secret: str) -> str:
    # Every send and every guardrail check asks for its run's mac: computed once per run id (and key).
    # Base32 lower-case: mail systems may fold the case of the local part. Base32 spells each 5 bytes as 8
    # letters, so the first MAC_LENGTH letters are those of the digest's first 10 bytes.
    mac = _keyed(secret).copy()
    mac.update(str(run_id).encode())
    return base64.b32encode(mac.digest()[:MAC_LENGTH * 5 // 8]).decode().lower()


@functools.lru_cache(maxsize=8)
def _keyed(secret: str) -> hmac.HMAC:
    """django.utils.crypto.salted_hmac's HMAC before any message: its purpose-specific key derived from `secret`
    once, not once per run (each `copy()` goes on from here)."""
    key = hashlib.sha256(force_bytes(MAC_PURPOSE) + force_bytes(secret)).digest()
    return hmac.new(key, digestmod=hashlib.sha256)


def reply_token(run_id: int) -> str:
    """`<run id>-<mac>`: what goes after `reply+` in a run's reply-to address."""
    return f"{int(run_id)}-{_mac(int(run_id))}"


def reply_address(run_id: int) -> str:
    return address_for_token(reply_token(run_id))


def address_for_token(token: str) -> str:
    return f"{REPLY_PREFIX}{token}@{settings.LUCIA_INBOUND_DOMAIN}"


def parse_reply_token(token: str) -> int | None:
    """The run id a token names, or None when it is malformed or its mac does not verify."""
    match = _TOKEN.match(token.strip().lower())
    if not match:
        return None
    run_id = int(match["run"])
    return run_id if constant_time_compare(match["mac"], _mac(run_id)) else None


def parse_reply_address(address: str) -> int | None:
    """The run id of a `reply+<token>@LUCIA_INBOUND_DOMAIN` address (display name allowed), or None."""
    match = re.search(r"<?([^<>\s]+@[^<>\s]+)>?\s*$", address.strip())
    if not match:
        return None
    local, _, domain = match[1].rpartition("@")
    if domain.lower() != settings.LUCIA_INBOUND_DOMAIN.lower() or not local.lower().startswith(REPLY_PREFIX):
        return None
    return parse_reply_token(local[len(REPLY_PREFIX):])


def message_id_for(idem_key: str) -> str:
    """The Message-ID header of the email sent for this key; a resend carries the same one."""
    return f"<{idem_key[:MESSAGE_ID_KEY_LENGTH].lower()}@{settings.LUCIA_INBOUND_DOMAIN}>"


def parse_message_id(message_id: str) -> str | None:
    """The idempotency-key prefix inside one of our Message-IDs; None for anyone else's."""
    match = _MESSAGE_ID.fullmatch(message_id.strip())
    if not match or match["domain"].lower() != settings.LUCIA_INBOUND_DOMAIN.lower():
        return None
    local = match["local"].lower()
    if len(local) != MESSAGE_ID_KEY_LENGTH or not re.fullmatch(r"[0-9a-f]+", local):
        return None
    return local


def split_references(header: str | None) -> list[str]:
    """The Message-IDs in a References or In-Reply-To header value, in order."""
    return re.findall(r"<[^<>\s]+>", header or "")


def key_prefixes_in(*headers: str | None) -> list[str]:
    """Idempotency-key prefixes of our own Message-IDs found in In-Reply-To/References, newest first."""
    found: list[str] = []
    for header in headers:
        for message_id in reversed(split_references(header)):
            prefix = parse_message_id(message_id)
            if prefix and prefix not in found:
                found.append(prefix)
    return found
