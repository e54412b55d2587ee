"""The guardrail: deterministic rules on every send, a model verdict when LUCIA_GUARDRAIL_MODEL is set."""

import re

import pytest

from runs import guardrails, leases
from runs.models import Escalation, JournalEntry, OutboxMessage, Run, RunStatus
from tests.fakes.openai_server import FakeOpenAIServer, completion
from tests.runs import loop_helpers as h
from tests.runs import send_helpers as s

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LUCIA_LLM = "scripted"
    settings.LUCIA_GUARDRAIL_MODEL = ""


def _review(run, body: str, *, channel: str = "email"):
    ctx = h.context(run, h.add_episode(run, "start"), epoch=h.claim(run))
    return guardrails.review(ctx, tool=f"send_{channel}", channel=channel, recipient=h.VENDOR_EMAIL,
                             payload={"body": body})


def test_a_url_urllib_cannot_split_in_the_run_s_own_text_is_no_error():
    run = h.make_run()
    run.goal = "Collect the W-9 (portal http://[broken)"
    verdict = _review(run, "Hi Dana, could you send the signed W-9 this week?")

    assert verdict.allowed is True


@pytest.mark.parametrize(("body", "rule"), [
    ("x" * 1601, "max_length"),
    ("Please also copy audit@attacker.example on your reply.", "foreign_reference"),
    ("Upload it at https://evil.example/upload", "foreign_reference"),
    ("Or call us at +1 (212) 555-0199.", "foreign_reference"),
    ("Send the W-9 and we will pay your invoice today.", "payment_promise"),
    ("Without it our attorneys will take legal action.", "legal_threat"),
    ("Upload it at http://[evil.example/upload", "foreign_reference"),  # a URL urllib cannot split
])
def test_deterministic_rules_block(body, rule):
    run = h.make_run()
    verdict = _review(run, body, channel="sms" if rule == "max_length" else "email")

    assert verdict.allowed is False and verdict.rule == rule and verdict.model == ""


@pytest.mark.parametrize("body", [
    "The blank form is at https://www.irs.gov/pub/irs-pdf/fw9.pdf.",  # in the builder's scripted template
    f"Reply here or write to {h.VENDOR_EMAIL}.",  # the contact's own address
    "Invoice INV-2025-000123 is still open; we need the form before we can pay it.",
    "x" * 1600,
])
def test_what_belongs_to_the_run_passes(body):
    run = h.make_run()

    assert _review(run, body, channel="sms").allowed is True


def test_a_guardrail_block_is_journaled_and_escalated_and_nothing_is_sent():
    run = h.make_run()
    result, session = s.dispatch(run, h.add_episode(run, "followup"), "send_email",
                                 {**s.EMAIL, "body": "As asked, also sending this to audit@attacker.example."})

    assert result["ok"] is False and result["status"] == "blocked"
    assert session.stop and session.outcome.escalated
    assert not OutboxMessage.objects.exists()
    entry = JournalEntry.objects.get(run=run, kind="guardrail")
    assert entry.data["rule"] == "foreign_reference" and "audit@attacker.example" in entry.data["reason"]
    escalation = Escalation.objects.get(run=run)
    assert escalation.kind == "guardrail_block" and escalation.context["rule"] == "foreign_reference"
    assert run.__class__.objects.get(pk=run.pk).status == RunStatus.WAITING_HUMAN


@pytest.fixture
def guardrail_model(settings):
    with FakeOpenAIServer() as server:
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "test"
        settings.LUCIA_GUARDRAIL_MODEL = "gpt-4o-mini"
        yield server


def test_the_model_verdict_blocks_and_is_journaled_with_the_model(guardrail_model):
    guardrail_model.enqueue(completion(content='{"allow": false, "reason": "pressures the vendor"}'))
    run = h.make_run()
    result, _ = s.dispatch(run, h.add_episode(run, "start"), "send_email", s.EMAIL)

    assert result["status"] == "blocked" and not OutboxMessage.objects.exists()
    [request] = guardrail_model.requests
    assert request["model"] == "gpt-4o-mini" and "Could you send your W-9?" in request["messages"][1]["content"]
    entry = JournalEntry.objects.get(run=run, kind="guardrail")
    assert entry.data["allowed"] is False and entry.data["reason"] == "pressures the vendor"
    assert entry.data["model"].startswith("gpt-4o-mini")
    call = JournalEntry.objects.get(run=run, kind="model_call")
    assert call.model_provider == "openai" and call.tokens_in == 120
    assert Escalation.objects.get(run=run).kind == "guardrail_block"


def test_the_model_allows_and_a_re_executed_episode_replays_its_verdict(guardrail_model):
    guardrail_model.enqueue(completion(content='```json\n{"allow": true, "reason": "polite request"}\n```'))
    run = h.make_run()
    episode = h.add_episode(run, "start")
    epoch = h.claim(run)
    result, _ = s.dispatch(run, episode, "send_email", s.EMAIL, epoch=epoch)
    OutboxMessage.objects.all().delete()  # as if the first attempt died before writing its row
    again, _ = s.dispatch(run, episode, "send_email", s.EMAIL, epoch=epoch)

    assert result["status"] == again["status"] == "sent"
    assert len(guardrail_model.requests) == 1


def test_an_unreadable_model_verdict_blocks(guardrail_model):
    guardrail_model.enqueue(completion(content="Looks fine to me!"))
    run = h.make_run()
    result, _ = s.dispatch(run, h.add_episode(run, "start"), "send_email", s.EMAIL)

    assert result["status"] == "blocked"
    assert JournalEntry.objects.get(run=run, kind="guardrail").data["rule"] == "guardrail_model"


def test_only_what_neither_the_plan_nor_the_run_trusts_is_foreign_in_the_order_written():
    run = h.make_run()
    verdict = _review(run, f"Form: https://www.irs.gov/pub/irs-pdf/fw9.pdf. Copy audit@attacker.example and "
                           f"{h.VENDOR_EMAIL}, see https://evil.example/x or call +1 (212) 555-0199, "
                           f"again audit@attacker.example.")

    assert verdict.rule == "foreign_reference"
    assert verdict.reason == ("mentions audit@attacker.example, https://evil.example/x, +1 (212) 555-0199, "
                              "which the run does not know")


@pytest.mark.parametrize("text", [
    "Write to Audit@Attacker.Example or AUDIT@X.IO", "no at sign here: audit(at)x.example",
    "HTTPS://EVIL.EXAMPLE/x and Www.Evil.Example", "hxxp://evil.example", "ftp://files.example/x",
    "Call +1 (212) 555-0199, (212)555-0199 or 212.555.0199", "+44 20 7946 0958", "Invoice 2025-000123",
    "order 123-456-7890x", "ＷＷＷ.wide.example", "x" * 2000,
])
def test_what_a_scan_would_find_is_found_without_scanning_texts_it_cannot_match(text):
    for found, pattern in [(guardrails._emails, guardrails.EMAIL), (guardrails._urls, guardrails.URL),
                           (guardrails._phones, guardrails.PHONE)]:
        assert found(text) == pattern.findall(text)
        assert found(text.casefold()) == pattern.findall(text.casefold())


def test_ignorecase_matches_no_character_the_prefilters_fold_misses():
    # _urls skips a text without "://" and without "www." once lowered, _search one whose fold holds none of the
    # pattern's words: exact only while every character IGNORECASE matches with one of their letters folds to it.
    every_character = "".join(chr(point) for point in range(0x110000) if not 0xD800 <= point <= 0xDFFF)
    letters = set("w" + "".join(guardrails.PAYMENT_WORDS + guardrails.LEGAL_WORDS))

    for letter in letters:
        matched = set(re.findall(f"(?i){letter}", every_character))
        assert {guardrails._folded(character) for character in matched} == {letter}
    assert {guardrails._folded(character) for character in set(re.findall("(?i)w", every_character))} == {"w"}


@pytest.mark.parametrize("text", [
    "We will pay on Friday.", "WE WILL PAY", "we'll refund it", "I promise to reimburse you", "i shall wire it",
    "Payment is guaranteed.", "guaranteed refund", "We \u0130 will pay", "we wıll pay", "we will tranſfer",
    "Our lawyers will call.", "LEGAL ACTION follows", "a lawſuit", "we will sue you", "take you to court",
    "small claims", "our attorney will", "my legal team will", "collections agency", "Thanks for the W-9!",
    "Invoice INV-1 is open; we need the form before we can pay it.",
])
def test_the_payment_and_legal_rules_find_what_their_patterns_find(text):
    folded = guardrails._folded(text)
    for pattern, words in [(guardrails.PAYMENT_PROMISE, guardrails.PAYMENT_WORDS),
                           (guardrails.LEGAL_THREAT, guardrails.LEGAL_WORDS)]:
        found = guardrails._search(pattern, text, words=words, folded=folded)
        expected = pattern.search(text)
        assert (found and found.group(0)) == (expected and expected.group(0))


def test_a_worker_whose_claim_was_lost_journals_no_verdict_of_the_model(guardrail_model):
    """A database crash took the claim back and the next claim handed the same epoch to another worker: the
    guardrail's model call is journaled under the lease's owner as well as its epoch, so nothing is written."""
    guardrail_model.enqueue(completion(content='{"allow": true, "reason": "polite request"}'))
    run = h.make_run()
    episode = h.add_episode(run, "start")
    ctx = h.context(run, episode, epoch=h.claim(run, owner="worker-a"), owner="worker-a")
    Run.objects.filter(pk=run.pk).update(lease_owner="successor")

    with pytest.raises(leases.LeaseLost):
        guardrails.review(ctx, tool="send_email", channel="email", recipient=h.VENDOR_EMAIL,
                          payload={"body": "Could you send your W-9?"})

    assert len(guardrail_model.requests) == 1  # asked, but its answer is not the run's
    assert not JournalEntry.objects.filter(run=run).exists()
