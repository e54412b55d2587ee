"""Encryption at rest for identity secrets (provider tokens, signing keys).

The Fernet key is derived from `LUCIA_SECRETS_KEY` (falling back to
`DJANGO_SECRET_KEY`, with system check lucia.W002 saying so). Plain values
never leave this module except to the connector that needs them.
"""

import base64
import hashlib
import json

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretsUnreadable(Exception):
    """Stored secrets cannot be decrypted with the configured key."""


def _fernet() -> Fernet:
    material = settings.LUCIA_SECRETS_KEY or settings.SECRET_KEY
    key = base64.urlsafe_b64encode(hashlib.sha256(material.encode()).digest())
    return Fernet(key)


def encrypt(values: dict[str, str]) -> str:
    return _fernet().encrypt(json.dumps(values, sort_keys=True).encode()).decode()


def decrypt(token: str) -> dict[str, str]:
    if not token:
        return {}
    try:
        return json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken:
        raise SecretsUnreadable(
            "identity secrets cannot be decrypted: LUCIA_SECRETS_KEY changed since they were stored; "
            "restore the old key or enter the secrets again"
        ) from None
