"""The webhook replay table: each one-time value of a provider's signature is accepted once.

`claim` is one INSERT ... ON CONFLICT statement, so two concurrent deliveries
of the same request cannot both win: the second waits on the unique index
until the first's transaction ends, then finds the row (refused) or, when the
first rolled back, takes it. An expired row is taken over in the same
statement, so a late prune never refuses a legitimate value.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from django.db import connection

from connectors.models import WebhookNonce

# The table is connectors_webhooknonce (WebhookNonce); only values are parameters.
_CLAIM = """
    INSERT INTO connectors_webhooknonce (provider, digest, expires_at, created_at)
    VALUES (%(provider)s, %(digest)s, %(expires_at)s, %(now)s)
    ON CONFLICT (provider, digest) DO UPDATE SET expires_at = EXCLUDED.expires_at, created_at = EXCLUDED.created_at
    WHERE connectors_webhooknonce.expires_at <= %(now)s
    RETURNING id
"""


def digest_of(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", errors="surrogatepass")).hexdigest()


def claim(provider: str, value: str, *, now: datetime, expires_at: datetime) -> bool:
    """True when `value` was not seen (or its record expired): it is now taken until `expires_at`.

    Call inside the transaction that stores the request's effects: a rollback frees the value again,
    so the provider's retry of a failed delivery is not refused.
    """
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM, {"provider": provider, "digest": digest_of(value), "expires_at": expires_at,
                                "now": now})
        return cursor.fetchone() is not None


def prune(*, now: datetime) -> int:
    """Delete expired records; returns how many."""
    deleted, _ = WebhookNonce.objects.filter(expires_at__lte=now).delete()
    return deleted
