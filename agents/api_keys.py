"""Issuing and checking organization API keys. Only hashes are stored."""

import hashlib
import secrets

from django.utils import timezone

from agents.models import ApiKey, Organization

KEY_PREFIX = "lucia_"


def issue_key(organization: Organization, *, name: str, role: str = ApiKey.Role.RUNNER) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the plain key, which is shown once and never stored."""
    plain = KEY_PREFIX + secrets.token_urlsafe(32)
    api_key = ApiKey.objects.create(
        organization=organization, name=name, role=role, prefix=plain[: len(KEY_PREFIX) + 6], hashed_key=hash_key(plain)
    )
    return api_key, plain


def hash_key(plain: str) -> str:
    # Keys carry 256 bits of randomness, so a fast hash cannot be brute-forced.
    return hashlib.sha256(plain.encode()).hexdigest()


def find_active_key(plain: str) -> ApiKey | None:
    api_key = (
        ApiKey.objects.select_related("organization")
        .filter(hashed_key=hash_key(plain), revoked_at__isnull=True)
        .first()
    )
    if api_key is not None:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=timezone.now())
    return api_key


def revoke_key(api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
