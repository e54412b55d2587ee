"""Chaos (DESIGN §9 Reliability): real runs through several worker processes that are killed, paused and crashed.

Twenty real runs of one organization chase their vendor by SMS through a
local Twilio fake, on a three-rung ladder two seconds apart. Four forked
workers drain them while a seeded controller SIGKILLs some, SIGSTOPs others
past their lease (the parent expires it in SQL, another worker takes the run
over, then the paused one resumes as a zombie), and replacement workers come
armed with a crash at a fault point around the provider call. The fake's
lookup fails for a quarter of the recipients throughout, and for everyone
during a window; two crashes between send and record before the chaos make
sure one send is adopted and one becomes uncertain. Then the parent settles
every run and checks invariants that must hold under any interleaving,
never exact counts:

- no message went out twice (per idempotency key, and per recipient and body);
- every outbox row is settled: `sent` with the fake's message, or `uncertain`
  with an open uncertain_send escalation; none left `pending` or `sending`;
- no episode lost: none running, none queued and overdue; a failed or
  cancelled one has its escalation;
- every run waits for a human on an open escalation, and a run whose only
  escalation is the spent ladder sent all three rungs, each exactly once.

A worker paused between writing `sending` and calling the provider renews its
lease right before the call and stops when it lost it (the last test). A stall
inside the few instructions between that renewal and the request leaving the
process is still unfenced, so the controller does not take a run with a
`sending` row from a paused worker: the invariants here stay exact.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from runs import faults, starts, worker
from runs.models import (
    Episode,
    EpisodeStatus,
    Escalation,
    EscalationKind,
    EscalationStatus,
    OutboxMessage,
    OutboxStatus,
    Run,
    RunStatus,
)
from tests.chaos import db, driver, workers
from tests.factories import OrganizationFactory, deployed_agent
from tests.runs import send_helpers as s

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SEED = 20250304
RUNS = 20
WORKERS = 4
CHAOS_S = 12.0
RUNG_DELAY_S = 2
LADDER_STEPS = 3


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.LUCIA_PUBLIC_URL = "https://lucia.example.com"
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_FAULTS = []
    settings.LUCIA_FAULTS_DIR = str(tmp_path)
    # Forked children inherit these. The controller expires leases in SQL, so their length costs no time; 4 s
    # with a beat every 0.5 s means only a pause the controller made (not a slow machine) loses one.
    settings.LUCIA_LEASE_SECONDS = 4
    settings.LUCIA_HEARTBEAT_SECONDS = 0.5
    # Provider faults on the same fast scale: a crashed send is looked up a second after its attempt, a lookup
    # the fake fails is asked again after 0.3 s, and the second failure asks a human.
    settings.LUCIA_SEND_SETTLE_SECONDS = 1
    settings.LUCIA_SEND_RETRY_SECONDS = 0.3
    settings.LUCIA_SEND_LOOKUP_TRIES = 2


@pytest.fixture
def twilio():
    server = driver.ChaosTwilio(account_sid=s.ACCOUNT_SID, auth_token=s.AUTH_TOKEN).start()
    yield server
    server.stop()


def _chaos_plan() -> dict:
    """The template with an always-open window, a three-rung SMS ladder two seconds apart, and room in the caps."""
    plan = s.open_plan(per_contact_caps={"per_day": 10, "per_week": 10})
    plan["followup"].update(
        ladder=[{"step": step, "channel": "sms", "delay_s": 0 if step == 0 else RUNG_DELAY_S,
                 "delay_business_days": 0} for step in range(LADDER_STEPS)],
        max_attempts=LADDER_STEPS, on_exhausted="escalate",
    )
    return plan


def _start_runs(twilio: driver.ChaosTwilio, *, count: int = RUNS) -> list[Run]:
    organization = OrganizationFactory()
    s.sms_identity(organization, twilio)
    _, deployment = deployed_agent(_chaos_plan(), organization=organization)
    version = deployment.version
    return [
        starts.start_run(organization, version=version, goal=f"Collect the W-9 of vendor {index}", contacts=[
            {"role": "vendor", "name": f"Dana Vendor{index}", "phone": f"+1555555{2000 + index}",
             "timezone": "America/Chicago"}])
        for index in range(count)
    ]


def _idem_key(message: dict) -> str:
    return parse_qs(urlsplit(message["_status_callback"] or "").query).get("k", [""])[0]


def _unleash(twilio: driver.ChaosTwilio, tmp_path, rng: random.Random, *, adopted: OutboxMessage) -> driver.Tally:
    """Run the workers under chaos, then stop them all. The lookup outage starts once `adopted` was recovered."""
    start = time.monotonic()
    controller = driver.Controller(rng=rng, size=WORKERS, until=start + CHAOS_S + 3, log_dir=tmp_path,
                                   fault_rate=0.4, fault_points=("after_provider_call", "before_provider_call",
                                                                 "after_record"),
                                   # The instant between the lease renewal and the provider call is unfenced:
                                   # a paused worker keeps such a run, so the invariants here stay exact.
                                   spare_unfenced_sends=True)
    try:
        # Two of the first workers die at their first send: after the provider call, and before it.
        controller.start(armed_first=2)
        controller.run(chaos_until=start + rng.uniform(1.0, 3.0))
        controller.run(chaos_until=start + CHAOS_S - 3, until_true=lambda: OutboxMessage.objects.get(
            pk=adopted.pk).status != OutboxStatus.SENDING)
        twilio.lookup_down = True  # nobody can look anything up for a while
        controller.run(chaos_until=time.monotonic() + 2.0)
        twilio.lookup_down = False
        # Chaos is guaranteed, not left to chance: at least one kill and one pause past the lease.
        controller.kill()
        controller.pause()
        controller.run(chaos_until=start + CHAOS_S)
    finally:
        controller.stop_all()
    return controller.tally


def test_runs_survive_killed_paused_and_crashing_workers_without_duplicates_or_lost_episodes(twilio, tmp_path):
    rng = random.Random(SEED)
    runs = _start_runs(twilio)
    phones = [run.contacts.get().phone for run in runs]
    twilio.lookup_down_for = set(rng.sample(phones[1:], k=RUNS // 4))

    # Two crashes between send and record before the chaos, so both recoveries happen whatever the dice say:
    # one recipient's lookup works (the send is adopted), the other's fails (the send is uncertain).
    adopted, unknown = runs[0], next(run for run in runs if run.contacts.get().phone in twilio.lookup_down_for)
    for run in (adopted, unknown):
        code = workers.crash_at("after_provider_call", run.pk, log_dir=tmp_path)
        assert code == faults.KILLED_EXIT_CODE, f"the worker exited {code}: {workers.worker_errors(tmp_path)}"
        assert OutboxMessage.objects.get(run=run).status == OutboxStatus.SENDING

    tally = _unleash(twilio, tmp_path, rng, adopted=OutboxMessage.objects.get(run=adopted))
    rounds = driver.settle()

    summary = (f"chaos: {tally.spawned} workers spawned, {tally.killed} killed, {tally.paused} paused "
               f"({tally.zombies} resumed as zombies, {workers.fenced_stops(tmp_path)} stops on LeaseLost), "
               f"{tally.fault_exits} crashed at a fault point, {len(twilio.failed_lookups)} lookups failed; "
               f"settled in {rounds} rounds; outbox {dict(Counter(r.status for r in OutboxMessage.objects.all()))}\n"
               + "\n".join(tally.events))
    print(summary)  # shown with -s, and on failure
    assert workers.worker_errors(tmp_path) == [], "an exception escaped the runtime in a worker"
    assert tally.other_exits == [], "a worker exited other than by a kill, a fault or its deadline"
    assert tally.killed >= 1 and tally.paused >= 1 and tally.fault_exits >= 1, summary

    run_ids = [run.pk for run in runs]
    rows = list(OutboxMessage.objects.filter(run_id__in=run_ids))
    _assert_no_duplicate_sends(twilio, rows)
    _assert_outbox_settled(twilio, rows)
    _assert_no_lost_episodes(run_ids)
    _assert_runs_at_rest(run_ids, rows)
    first_sends = {row.run_id: row for row in rows if row.ordinal == 0 and row.episode.kind == "start"}
    assert first_sends[adopted.pk].status == OutboxStatus.SENT
    assert first_sends[unknown.pk].status == OutboxStatus.UNCERTAIN


def _assert_no_duplicate_sends(twilio: driver.ChaosTwilio, rows: list[OutboxMessage]) -> None:
    by_key = Counter(_idem_key(message) for message in twilio.messages)
    assert "" not in by_key, "a message went out without its idempotency key"
    assert [key for key, count in by_key.items() if count > 1] == [], "a key was sent more than once"
    by_text = Counter((message["to"], message["body"]) for message in twilio.messages)
    assert [pair for pair, count in by_text.items() if count > 1] == [], "a recipient got the same text twice"
    assert set(by_key) <= {row.idem_key for row in rows}, "a message went out without an outbox row"


def _assert_outbox_settled(twilio: driver.ChaosTwilio, rows: list[OutboxMessage]) -> None:
    sent_keys = {_idem_key(message): message["sid"] for message in twilio.messages}
    statuses = Counter(row.status for row in rows)
    assert set(statuses) <= {OutboxStatus.SENT, OutboxStatus.UNCERTAIN}, statuses
    for row in rows:
        if row.status == OutboxStatus.SENT:
            assert sent_keys.get(row.idem_key) == row.provider_message_id, f"row {row.pk} is sent but Twilio has " \
                "no such message"
        else:
            open_questions = Escalation.objects.filter(outbox_message=row, kind=EscalationKind.UNCERTAIN_SEND,
                                                       status=EscalationStatus.OPEN)
            assert open_questions.count() == 1, f"uncertain row {row.pk} has no open uncertain_send escalation"


def _assert_no_lost_episodes(run_ids: list[int]) -> None:
    episodes = Episode.objects.filter(run_id__in=run_ids)
    assert not episodes.filter(status=EpisodeStatus.RUNNING).exists(), "an episode is left running"
    overdue = episodes.filter(status=EpisodeStatus.QUEUED, due_at__lte=timezone.now())
    assert list(overdue.values_list("run_id", "seq")) == [], "an episode is left queued and overdue"
    for episode in episodes.filter(status=EpisodeStatus.FAILED):
        assert Escalation.objects.filter(episode=episode).exists(), f"failed episode {episode.pk} was not escalated"
    for episode in episodes.filter(status=EpisodeStatus.CANCELLED):
        assert Escalation.objects.filter(run_id=episode.run_id, status=EscalationStatus.OPEN).exists(), \
            f"episode {episode.pk} was cancelled with no escalation open on its run"
    assert episodes.filter(kind="start", status=EpisodeStatus.DONE).count() + episodes.filter(
        kind="start", status=EpisodeStatus.FAILED).count() == len(run_ids), "a start episode never finished"


def _assert_runs_at_rest(run_ids: list[int], rows: list[OutboxMessage]) -> None:
    for run in Run.objects.filter(pk__in=run_ids):
        open_questions = list(Escalation.objects.filter(run=run, status=EscalationStatus.OPEN))
        assert run.status == RunStatus.WAITING_HUMAN and open_questions, \
            f"run {run.pk} is {run.status} ({run.wake_when}) with {len(open_questions)} open escalations"
        assert run.wake_when in {f"human:{question.pk}" for question in open_questions}, run.wake_when
        if all(question.kind == EscalationKind.STUCK and question.episode.status == EpisodeStatus.DONE
               for question in open_questions):
            # Only the spent ladder is asked about: every rung went out, once.
            sent = [row for row in rows if row.run_id == run.pk and row.status == OutboxStatus.SENT]
            assert len(sent) == LADDER_STEPS, f"run {run.pk} spent its ladder with {len(sent)} sends"


def test_a_worker_paused_before_its_provider_call_sends_nothing_after_a_takeover(twilio, tmp_path, settings):
    settings.LUCIA_SEND_SETTLE_SECONDS = 0  # the new owner looks the key up at once
    [run] = _start_runs(twilio, count=1)
    paused = workers.spawn_paused_at("before_provider_call", run.pk, log_dir=tmp_path)
    try:
        # The paused worker wrote `sending` and stopped right before the provider call; its lease lapses.
        assert OutboxMessage.objects.get(run=run).status == OutboxStatus.SENDING
        assert db.expire_leases(db.owners_of(paused.pid)) != []
        # The new owner's lookup finds nothing, so it sends; the resumed worker finds its lease gone and stops.
        assert worker.advance_run(run.pk, owner="second-worker") is True
    finally:
        paused.resume()
    assert paused.process.exitcode == 0 and workers.worker_errors(tmp_path) == []

    row = OutboxMessage.objects.get(run=run)
    assert row.status in (OutboxStatus.SENT, OutboxStatus.UNCERTAIN)
    assert len(twilio.messages) == 1, "the resumed zombie sent the message a second time"

