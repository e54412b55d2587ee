"""Reading lease owners back to worker processes, for picking busy and idle workers to kill."""

import os

from chaos import observe, scenario
from runs import worker


def test_a_lease_owner_names_the_worker_process_for_both_owner_formats():
    assert observe.owner_pid("host-a:4242:140093:9f86d081") == 4242  # runs.worker.default_owner
    assert observe.owner_pid(worker.default_owner()) == os.getpid()
    assert observe.owner_pid("reaper:host-a:4243:9f86d081") == 4243  # runs.dispatch.reap_expired
    assert observe.owner_pid("settler") is None


def test_contacts_get_a_zone_where_it_is_about_noon_so_the_send_window_never_closes_mid_run():
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    for hour in range(24):
        now = datetime(2026, 12, 1, hour, 30, tzinfo=UTC)
        local = now.astimezone(ZoneInfo(scenario.noon_timezone(now)))
        assert 11 <= local.hour <= 13, (hour, local)
