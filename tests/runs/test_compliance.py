"""Per-contact caps hold when two runs write to the same person at the same instant (real threads): a new send,
and a held one whose time has come; and a send that waits for the address's lock counts what its holder recorded."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs import compliance, episode_loads, outbox, tool_executor
from runs.models import JournalEntry, OutboxMessage, OutboxStatus, Run
from tests.commit_settings import statements_run
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s
from tests.runs.lock_waits import wait_for_a_lock_wait


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_LLM = "scripted"


@pytest.fixture
def twilio():
    server = s.start_twilio()
    yield server
    server.stop()


def _held_sms(run, episode) -> OutboxMessage:
    """An SMS to the vendor that a flush may send now: held earlier (not_before passed), not yet sent."""
    return OutboxMessage.objects.create(
        idem_key=outbox.idem_key(run_id=run.pk, episode_id=episode.pk, task_key="", tool="send_sms",
                                 recipient=s.VENDOR_NUMBER, ordinal=0),
        run=run, episode=episode, tool="send_sms", channel="sms", recipient=s.VENDOR_NUMBER,
        payload={"body": "Your W-9, please."}, created_at=timezone.now() - timedelta(hours=2),
        not_before=timezone.now() - timedelta(hours=1),
    )


def _race(work, *, step, wait_after, monkeypatch) -> tuple[dict, list]:
    """Run `step(run, episode, epoch)` for each item of `work` in its own thread, all of them waiting for each other
    right after `wait_after` (a module attribute, as (module, name)) returned: the instant between deciding a send
    and recording it, which the address's lock must close."""
    both_decided = threading.Barrier(len(work), timeout=30)
    module, name = wait_after
    original = getattr(module, name)

    def then_wait(*args, **kwargs):
        result = original(*args, **kwargs)
        both_decided.wait()
        return result

    monkeypatch.setattr(module, name, then_wait)
    results, errors = {}, []

    def run_step(run, episode, epoch):
        try:
            results[run.pk] = step(run, episode, epoch)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run_step, args=item) for item in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results, errors


@pytest.mark.django_db(transaction=True)
def test_two_runs_racing_to_the_same_contact_send_only_what_the_cap_allows(twilio, monkeypatch):
    plan = s.open_plan(per_contact_caps={"per_day": 1, "per_week": 5})
    first = s.real_run(plan)
    second = s.real_run(plan, organization=first.organization)
    s.sms_identity(first.organization, twilio)
    work = [(run, h.add_episode(run, "start"), h.claim(run)) for run in (first, second)]

    # Both runs pass the decision-time cap check before either records its send: the race the lock closes.
    results, errors = _race(work, step=lambda run, episode, epoch: s.dispatch(run, episode, "send_sms", s.SMS,
                                                                              epoch=epoch)[0],
                            wait_after=(compliance, "check"), monkeypatch=monkeypatch)

    assert errors == []
    assert len(twilio.messages) == 1  # the cap is one a day, however many runs chase the person
    assert sorted(result["status"] for result in results.values()) == ["held", "sent"]
    held = OutboxMessage.objects.get(status=OutboxStatus.PENDING)
    assert held.not_before is not None
    assert OutboxMessage.objects.filter(status=OutboxStatus.SENT).count() == 1
    block = JournalEntry.objects.get(run_id=held.run_id, kind="policy_block")
    assert block.data["at_send"] is True and block.data["outbox_id"] == held.pk


@pytest.mark.django_db(transaction=True)
def test_two_runs_flushing_held_sends_to_the_same_contact_send_only_what_the_cap_allows(twilio, monkeypatch):
    plan = s.open_plan(per_contact_caps={"per_day": 1, "per_week": 5})
    first = s.real_run(plan)
    second = s.real_run(plan, organization=first.organization)
    s.sms_identity(first.organization, twilio)
    work = []
    for run in (first, second):
        episode = h.add_episode(run, "flush")
        _held_sms(run, episode)
        work.append((run, episode, h.claim(run)))

    # Both held rows are due and see room when the flush looks at them: only one may take the slot.
    results, errors = _race(work, step=lambda run, episode, epoch: tool_executor.flush_pending(
        h.context(run, episode, epoch=epoch)), wait_after=(tool_executor, "_still_held"), monkeypatch=monkeypatch)

    assert errors == []
    assert len(twilio.messages) == 1
    assert sorted(outcome.status for outcomes in results.values() for outcome in outcomes) == ["held", "sent"]
    assert OutboxMessage.objects.filter(status=OutboxStatus.SENT).count() == 1
    held = OutboxMessage.objects.get(status=OutboxStatus.PENDING)
    assert held.not_before > timezone.now() and held.attempts == 0


def _a_send_recorded_under_the_lock(run, *, holding: threading.Event, release: threading.Event) -> None:
    """Another run of the organization records a send to the vendor's number under the address's lock, in a
    transaction that commits (releasing the lock) once `release` is set."""
    with transaction.atomic():
        with connection.cursor() as cursor:  # the lock as a send's statement takes it, with the read under it
            cursor.execute("SELECT lucia_send_times_locked(%s, %s, %s, %s, %s)", [
                compliance.address_lock(run.organization_id, recipient=s.VENDOR_NUMBER), s.VENDOR_NUMBER,
                run.organization_id, timezone.now(), timezone.now()])
        OutboxMessage.objects.create(
            idem_key=outbox.idem_key(run_id=run.pk, episode_id=0, task_key="", tool="send_sms",
                                     recipient=s.VENDOR_NUMBER, ordinal=0),
            run=run, episode=h.add_episode(run, "start"), tool="send_sms", channel="sms",
            recipient=s.VENDOR_NUMBER, payload={"body": "Your W-9, please."}, created_at=timezone.now(),
            status=OutboxStatus.SENDING, attempts=1, attempted_at=timezone.now(),
        )
        holding.set()
        release.wait(60)


def _behind_the_lock(step, *, organization) -> object:
    """Run `step()` in a thread while another run holds the address's lock with a send it has not committed yet;
    the holder commits once the step waits for the lock. What `step` returned."""
    other = s.real_run(s.open_plan(), organization=organization)
    holding, release = threading.Event(), threading.Event()
    results, errors = {}, []

    def in_thread(name, work):
        def target():
            try:
                results[name] = work()
            except Exception as exc:  # surfaced below
                errors.append(exc)
            finally:
                connection.close()
        thread = threading.Thread(target=target)
        thread.start()
        return thread

    holder = in_thread("holder", lambda: _a_send_recorded_under_the_lock(other, holding=holding, release=release))
    assert holding.wait(30)
    stepper = in_thread("step", step)
    # Polled from here, outside the holder's transaction (a transaction sees one snapshot of pg_stat_activity).
    waited = wait_for_a_lock_wait()
    release.set()
    for thread in (holder, stepper):
        thread.join(60)
    assert waited, "the send did not wait for the address's lock"
    assert errors == []
    return results["step"]


@pytest.mark.django_db(transaction=True)
def test_the_locked_read_of_the_send_times_sees_what_the_lock_s_last_holder_committed():
    """One statement takes the address's lock and reads the sends (runs/migrations/0018_send_times_functions.py):
    the read is made after the lock is granted, not as the statement's snapshot had it when it began."""
    run = s.real_run(s.open_plan())
    now = timezone.now()

    def locked_read() -> list:
        with connection.cursor() as cursor:
            cursor.execute("SELECT lucia_send_times_locked(%s, %s, %s, %s, %s)", [
                compliance.address_lock(run.organization_id, recipient=s.VENDOR_NUMBER),
                s.VENDOR_NUMBER, run.organization_id, now - timedelta(days=1), now + timedelta(minutes=1)])
            return cursor.fetchone()[0]

    assert len(_behind_the_lock(locked_read, organization=run.organization)) == 1


@pytest.mark.django_db(transaction=True)
def test_a_new_send_waiting_for_the_address_lock_counts_the_send_recorded_under_it(twilio):
    run = s.real_run(s.open_plan(per_contact_caps={"per_day": 1, "per_week": 5}))
    s.sms_identity(run.organization, twilio)
    episode, epoch = h.add_episode(run, "start"), h.claim(run)

    # The episode's facts hold no send to the number: the decision sees room, the count under the lock does not.
    result = _behind_the_lock(lambda: s.dispatch(run, episode, "send_sms", s.SMS, epoch=epoch)[0],
                              organization=run.organization)

    assert result["status"] == "held"
    assert twilio.messages == []
    held = OutboxMessage.objects.get(run=run)
    assert held.status == OutboxStatus.PENDING and held.not_before > timezone.now()
    block = JournalEntry.objects.get(run=run, kind="policy_block")
    assert block.data["at_send"] is True and block.data["cap"] == "per_day"


@pytest.mark.django_db(transaction=True)
def test_a_held_send_waiting_for_the_address_lock_counts_the_send_recorded_under_it(twilio):
    run = s.real_run(s.open_plan(per_contact_caps={"per_day": 1, "per_week": 5}))
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "flush")
    _held_sms(run, episode)
    epoch = h.claim(run)

    outcomes = _behind_the_lock(lambda: tool_executor.flush_pending(h.context(run, episode, epoch=epoch)),
                                organization=run.organization)

    assert [outcome.status for outcome in outcomes] == ["held"]
    assert twilio.messages == []
    held = OutboxMessage.objects.get(run=run)
    assert held.status == OutboxStatus.PENDING and held.not_before > timezone.now() and held.attempts == 0


@pytest.mark.django_db(transaction=True)
def test_the_statement_that_records_a_capped_send_takes_the_address_lock_and_its_commit_releases_it(twilio):
    run = s.real_run(s.open_plan(per_contact_caps={"per_day": 2}))
    s.sms_identity(run.organization, twilio)
    episode = h.add_episode(run, "start")

    (opened,) = statements_run(lambda: s.dispatch(run, episode, "send_sms", s.SMS),
                               picked=lambda sql: "INSERT INTO runs_outboxmessage" in sql)

    assert "lucia_send_times_locked(" in opened[0]
    assert len(twilio.messages) == 1
    assert _advisory_locks_held() == 0


def _advisory_locks_held() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()")
        return cursor.fetchone()[0]


def test_every_read_of_the_sends_caps_count_takes_what_counted_statuses_names(db):
    """The caps' three reads of the sends (a real run's, runs/migrations/0018_send_times_functions.py; a
    simulation's, runs.compliance.SIM_SEND_TIMES_SQL; the episode's facts, runs.episode_loads.CAPS_SQL) count the
    rows of COUNTED_STATUSES and no other."""
    plan = s.open_plan(per_contact_caps={"per_day": 5})
    now = timezone.now()
    real, simulated = s.real_run(plan), s.real_run(plan)
    Run.objects.filter(pk=simulated.pk).update(sim=True)
    simulated.refresh_from_db()
    status_at = {}
    for run in (real, simulated):
        for minutes, status in enumerate(OutboxStatus.values, start=1):
            at = now - timedelta(minutes=minutes)
            status_at[at] = status
            OutboxMessage.objects.create(
                idem_key=f"k-{run.pk}-{status}", run=run, episode=h.add_episode(run, "start"), tool="send_sms",
                channel="sms", recipient=s.VENDOR_NUMBER, payload={}, created_at=at, status=status)
    since = now - timedelta(days=1)
    episode = h.add_episode(real, "followup")

    reads = {
        "real": compliance.recent_send_times(real, recipient=s.VENDOR_NUMBER, since=since, until=now),
        "simulated": compliance.recent_send_times(simulated, recipient=s.VENDOR_NUMBER, since=since, until=now),
        "facts": [created for created, _ in episode_loads.facts_for(real, episode, plan=plan)
                  .sends_by_recipient[s.VENDOR_NUMBER]],
    }

    for name, times in reads.items():
        assert sorted(status_at[at] for at in times) == sorted(compliance.COUNTED_STATUSES), name
