import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from connectors import nonces
from connectors.models import WebhookNonce

pytestmark = pytest.mark.django_db


def test_a_value_is_claimed_once_until_it_expires_then_again():
    now = timezone.now()
    assert nonces.claim("mailgun", "tok", now=now, expires_at=now + timedelta(minutes=6))
    assert not nonces.claim("mailgun", "tok", now=now + timedelta(minutes=5), expires_at=now + timedelta(minutes=11))
    assert nonces.claim("slack", "tok", now=now, expires_at=now + timedelta(minutes=6)), "providers are apart"
    assert nonces.claim("mailgun", "tok", now=now + timedelta(minutes=7), expires_at=now + timedelta(minutes=13))
    assert WebhookNonce.objects.filter(provider="mailgun").count() == 1


def test_prune_deletes_only_expired_rows():
    now = timezone.now()
    nonces.claim("twilio", "old", now=now, expires_at=now + timedelta(seconds=1))
    nonces.claim("twilio", "new", now=now, expires_at=now + timedelta(days=7))

    assert nonces.prune(now=now + timedelta(minutes=1)) == 1
    assert list(WebhookNonce.objects.values_list("digest", flat=True)) == [nonces.digest_of("new")]


def test_a_rolled_back_claim_frees_the_value():
    now = timezone.now()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert nonces.claim("mailgun", "tok", now=now, expires_at=now + timedelta(minutes=6))
        raise RuntimeError("storing the request failed")
    assert nonces.claim("mailgun", "tok", now=now, expires_at=now + timedelta(minutes=6))


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_of_one_value_have_one_winner():
    now = timezone.now()
    barrier = threading.Barrier(6)
    results: list[bool] = []

    def claim() -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                results.append(nonces.claim("mailgun", "same", now=now, expires_at=now + timedelta(minutes=6)))
        finally:
            connection.close()

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [False] * 5 + [True]
