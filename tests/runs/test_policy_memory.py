"""runs.policy.memory: the follow-up policy's reading of a contact's history (pure functions)."""

from datetime import UTC, datetime, timedelta

from runs.policy import memory

NOW = datetime(2025, 3, 4, 16, 0, tzinfo=UTC)


def test_the_latest_preference_picks_the_channel_unless_the_agent_cannot_use_it():
    history = [{"kind": "preference", "channel": "email"}, {"kind": "preference", "channel": "sms"}]
    assert memory.channel_for(history, ladder_channel="email", allowed=["email", "sms"]) == "sms"
    assert memory.channel_for(history, ladder_channel="email", allowed=["email"]) == "email"


def test_an_opted_out_channel_is_never_chosen():
    history = [{"kind": "preference", "channel": "sms"}, {"kind": "opt_out", "channels": ["sms"]}]
    assert memory.preferred_channel(history) is None
    assert memory.channel_for(history, ladder_channel="sms", allowed=["email", "sms"]) == "email"
    assert memory.channel_for([{"kind": "opt_out", "channels": ["email", "sms"]}], ladder_channel="sms",
                              allowed=["email", "sms"]) is None


def test_an_opt_in_lifts_an_opt_out():
    history = [{"kind": "opt_out", "channels": ["sms"]}, {"kind": "opt_in", "channels": ["sms"]}]
    assert memory.opted_out(history) == set()


def test_an_absence_holds_until_the_return_date_only():
    back = NOW + timedelta(days=10)
    history = [{"kind": "absence", "until": back.isoformat()}]
    assert memory.absent_until(history, now=NOW) == back
    assert memory.absent_until(history, now=back + timedelta(seconds=1)) is None


def test_the_answer_deadline_stays_channel_less():
    assert memory.channel_for([{"kind": "preference", "channel": "sms"}], ladder_channel=None,
                              allowed=["email", "sms"]) is None
