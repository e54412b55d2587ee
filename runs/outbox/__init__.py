"""The outbox: one row per intended send, found again by its key; the only package writing OutboxMessage
(besides escalations.resolve settling an uncertain row a human decided). Runs' sends (`sends`) and the escalation
notices of runs.notifications (`notices`) both live here, one writer of the table in two modules.
"""

from runs.outbox.notices import claim_notices, claim_stale_notices, notice_key, open_notice, settle_notice
from runs.outbox.sends import (
    await_lookup,
    begin_send,
    discard_draft,
    hold,
    idem_key,
    normalize_recipient,
    open_row,
    record_abandoned,
    record_failed,
    record_not_sent,
    record_retry,
    record_sent,
    record_uncertain,
    release_draft,
    unsettled_for,
)

__all__ = [
    "await_lookup", "begin_send", "claim_notices", "claim_stale_notices", "discard_draft", "hold", "idem_key",
    "normalize_recipient", "notice_key", "open_notice", "open_row", "record_abandoned", "record_failed",
    "record_not_sent", "record_retry", "record_sent", "record_uncertain", "release_draft", "settle_notice",
    "unsettled_for",
]
