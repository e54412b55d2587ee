"""The model layer: the real openai client against a local fake server, journaled replay, the request hash,
choosing a provider (the scripted model's own rules: test_llm_scripted.py)."""

from decimal import Decimal

import pytest

from runs import leases
from runs.llm import journaled, providers
from runs.llm.base import ChatRequest, ModelError, canonical_json, frozen, function_tools
from runs.llm.openai_provider import OpenAIProvider
from runs.llm.scripted import MODEL_NAME, ScriptedProvider
from runs.models import JournalEntry, Run
from tests.factories import RunFactory
from tests.fakes.openai_server import FakeOpenAIServer, completion, error, garbage, stall
from tests.runs.llm_helpers import PLAN_TOOLS, Sleeps, call_model, chat_request

SEND = ("send_email", {"to_role": "vendor", "subject": "W-9", "body": "Could you send your W-9?"})


@pytest.fixture
def fake_openai():
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def openai_provider(fake_openai):
    return OpenAIProvider(base_url=fake_openai.base_url, api_key="test-key", timeout=0.5)


# --- the OpenAI provider, through the real client -------------------------------------------------

def test_tool_calls_are_parsed_and_usage_is_priced(fake_openai, openai_provider):
    fake_openai.enqueue(completion(tool_calls=[SEND], usage=(1000, 200), model="gpt-4o-mini-2024-07-18"))

    reply = openai_provider.complete(chat_request())

    assert [(call.name, call.arguments) for call in reply.tool_calls] == [SEND]
    assert reply.finish_reason == "tool_calls"
    assert (reply.tokens_in, reply.tokens_out) == (1000, 200)
    assert reply.cost == Decimal("0.00027")  # 1000 × $0.15/M + 200 × $0.60/M
    assert (reply.provider, reply.model_name) == ("openai", "gpt-4o-mini-2024-07-18")
    sent = fake_openai.requests[0]
    assert sent["_headers"]["authorization"] == "Bearer test-key"
    assert sent["tools"][0]["function"]["name"] == "send_email"
    assert "metadata" not in sent  # the scripted model's facts never leave the process


def test_unknown_model_costs_nothing_and_says_so(fake_openai, openai_provider):
    fake_openai.enqueue(completion(content="hi", usage=(10, 2), model="llama3.1:8b"))
    reply = openai_provider.complete(chat_request())
    assert (reply.tokens_in, reply.tokens_out, reply.cost) == (10, 2, Decimal(0))
    assert any("no price known" in note for note in reply.raw["notes"])


def test_missing_usage_records_zero_tokens_with_a_note(fake_openai, openai_provider):
    fake_openai.enqueue(completion(content="hi", usage=None))
    reply = openai_provider.complete(chat_request())
    assert (reply.tokens_in, reply.tokens_out) == (0, 0)
    assert any("no usage" in note for note in reply.raw["notes"])


@pytest.mark.parametrize(("response", "retryable", "words"), [
    (error(429), True, "429"),
    (error(500), True, "500"),
    (error(503), True, "503"),
    (stall(2.0), True, "Timeout"),
    (garbage(), True, "malformed output"),
    (completion(tool_calls=[("send_email", '{"to_role": "vendor", ')]), True, "malformed output"),
    (completion(tool_calls=[("send_email", '["not", "an", "object"]')]), True, "malformed output"),
    (error(401), False, "401"),
    (error(400), False, "400"),
])
def test_provider_errors_map_to_model_error(fake_openai, openai_provider, response, retryable, words):
    fake_openai.enqueue(response)
    with pytest.raises(ModelError) as failure:
        openai_provider.complete(chat_request())
    assert failure.value.retryable is retryable
    assert words in failure.value.message


def test_connection_refused_is_retryable():
    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="test-key", timeout=0.5)
    with pytest.raises(ModelError) as failure:
        provider.complete(chat_request())
    assert failure.value.retryable


def test_missing_api_key_is_not_retryable(settings):
    settings.OPENAI_API_KEY = None
    with pytest.raises(ModelError) as failure:
        OpenAIProvider(base_url="http://127.0.0.1:9/v1").complete(chat_request())
    assert not failure.value.retryable


# --- journaled calls: retries, replay, budgets ----------------------------------------------------

@pytest.mark.django_db
def test_rate_limit_then_success_is_retried_and_journaled_once(fake_openai, openai_provider, leased_run):
    run, epoch, episode = leased_run
    fake_openai.enqueue(error(429, headers={"retry-after": "30"}), completion(tool_calls=[SEND], usage=(100, 10)))
    sleeps = Sleeps()

    reply = call_model(openai_provider, run, epoch, episode, chat_request(), sleep=sleeps)

    assert reply.tool_calls[0].name == "send_email"
    assert fake_openai.request_count == 2
    assert sleeps == [journaled.MAX_WAIT_S]  # Retry-After honoured, but capped
    entry = JournalEntry.objects.get(run=run)
    assert (entry.kind, entry.model_provider, entry.tokens_in, entry.tokens_out) == ("model_call", "openai", 100, 10)
    assert entry.model_name == "gpt-4o-mini-2024-07-18"
    assert entry.data["usage"]["prompt_tokens"] == 100
    assert entry.data["reply"]["tool_calls"][0]["arguments"] == SEND[1]


@pytest.mark.django_db
def test_server_errors_past_the_bound_raise_and_journal_nothing(fake_openai, openai_provider, leased_run):
    run, epoch, episode = leased_run
    fake_openai.enqueue(*[error(500)] * 5)
    sleeps = Sleeps()

    with pytest.raises(ModelError) as failure:
        call_model(openai_provider, run, epoch, episode, chat_request(), sleep=sleeps)

    attempts = len(journaled.BACKOFF_S) + 1
    assert fake_openai.request_count == attempts
    assert sleeps == list(journaled.BACKOFF_S)
    assert f"attempt {attempts} of {attempts}" in failure.value.message
    assert not JournalEntry.objects.filter(run=run).exists()
    assert Run.objects.filter(pk=run.pk).values_list("tokens_used", "steps_used").get() == (0, 0)


@pytest.mark.django_db
def test_a_rejected_request_is_not_retried(fake_openai, openai_provider, leased_run):
    run, epoch, episode = leased_run
    fake_openai.enqueue(error(401), completion(content="never reached"))
    with pytest.raises(ModelError) as failure:
        call_model(openai_provider, run, epoch, episode, chat_request())
    assert not failure.value.retryable
    assert fake_openai.request_count == 1


@pytest.mark.django_db
def test_malformed_output_is_retried_then_succeeds(fake_openai, openai_provider, leased_run):
    run, epoch, episode = leased_run
    fake_openai.enqueue(completion(tool_calls=[("send_email", "{oops")]), completion(tool_calls=[SEND]))
    reply = call_model(openai_provider, run, epoch, episode, chat_request())
    assert reply.tool_calls[0].arguments == SEND[1]
    assert fake_openai.request_count == 2


@pytest.mark.django_db
def test_replay_returns_the_recorded_reply_without_calling_or_charging_again(fake_openai, openai_provider,
                                                                             leased_run):
    run, epoch, episode = leased_run
    fake_openai.enqueue(completion(tool_calls=[SEND], usage=(100, 10)))

    first = call_model(openai_provider, run, epoch, episode, chat_request())
    again = call_model(openai_provider, run, epoch, episode, chat_request())

    assert fake_openai.request_count == 1
    assert again.replayed and not first.replayed
    assert (again.tool_calls, again.content, again.tokens_in, again.cost, again.model_name, again.provider) == (
        first.tool_calls, first.content, first.tokens_in, first.cost, first.model_name, first.provider)
    assert again.assistant_message() == first.assistant_message()
    assert Run.objects.filter(pk=run.pk).values_list("tokens_used", "steps_used").get() == (110, 1)


@pytest.mark.django_db
def test_the_same_request_twice_in_an_episode_is_two_calls(fake_openai, openai_provider, leased_run):
    run, epoch, episode = leased_run
    fake_openai.enqueue(completion(content="one"), completion(content="two"))
    assert call_model(openai_provider, run, epoch, episode, chat_request(), occurrence=1).content == "one"
    assert call_model(openai_provider, run, epoch, episode, chat_request(), occurrence=2).content == "two"
    assert call_model(openai_provider, run, epoch, episode, chat_request(), occurrence=2).content == "two"
    assert fake_openai.request_count == 2


@pytest.mark.django_db
def test_a_reply_for_a_lost_lease_is_not_journaled(fake_openai, openai_provider, leased_run):
    run, epoch, episode = leased_run
    leases.release(run.pk, epoch=epoch)
    leases.claim(run.pk, owner="another-worker")
    with pytest.raises(leases.LeaseLost):
        call_model(openai_provider, run, epoch, episode, chat_request())
    assert not JournalEntry.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_check_budget_names_the_spent_budget():
    run = RunFactory(step_budget=10, token_budget=1000, cost_budget=Decimal("1"))
    assert journaled.check_budget(run) is None
    run.steps_used = 10
    assert "step budget" in journaled.check_budget(run)
    run.steps_used, run.tokens_used = 0, 1000
    assert "token budget" in journaled.check_budget(run)
    run.tokens_used, run.cost_used = 0, Decimal("1.0000")
    assert "cost budget" in journaled.check_budget(run)


# --- the request hash (the journal's replay key) -----------------------------------------------------

HASHED = {"model": "gpt-4o-mini", "temperature": 0.2,
          "messages": [{"role": "system", "content": "Chase the W-9 — politely."},
                       {"role": "user", "content": "hello"}],
          "metadata": {"event": {"kind": "start"}, "scripted": {"messages": {"first": "Hi {contact.name}"}},
                       "now": "2026-03-03T15:00:00+00:00"}}
# sha256 of the request's canonical JSON as journals written so far recorded it: it must never change.
HASHED_SHA256 = "6f5a887a2ec3fbdf6e4c26a5ca10e41322626fb289fd36f3bd0c10385fe6b9fc"


def test_the_request_hash_of_journals_already_written_does_not_change():
    assert ChatRequest(**HASHED, tools=function_tools(PLAN_TOOLS)).request_hash() == HASHED_SHA256


def test_frozen_parts_hash_as_the_plain_request_does():
    system, user = HASHED["messages"]
    metadata = {**HASHED["metadata"], "scripted": frozen(HASHED["metadata"]["scripted"])}
    request = ChatRequest(**{**HASHED, "messages": [frozen(system), user], "metadata": metadata},
                          tools=frozen(function_tools(PLAN_TOOLS)))
    assert request.request_hash() == HASHED_SHA256


def test_an_episode_s_frozen_facts_and_user_message_hash_as_the_plain_request_does():
    # The loop freezes the episode's facts (which hold the plan's frozen hints) and its user message once.
    system, user = HASHED["messages"]
    metadata = frozen({**HASHED["metadata"], "scripted": frozen(HASHED["metadata"]["scripted"])})
    first = ChatRequest(**{**HASHED, "messages": [frozen(system), frozen(user)], "metadata": metadata},
                        tools=frozen(function_tools(PLAN_TOOLS)))
    later = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "finish", "arguments": "{}"}}]}
    second = ChatRequest(**{**HASHED, "messages": [*first.messages, later], "metadata": metadata},
                         tools=first.tools)

    assert metadata.canonical == canonical_json(HASHED["metadata"])
    assert first.request_hash() == HASHED_SHA256
    assert second.request_hash() == ChatRequest(**{**HASHED, "messages": [system, user, later]},
                                                tools=function_tools(PLAN_TOOLS)).request_hash()


# --- choosing a provider --------------------------------------------------------------------------

def test_provider_for_follows_the_plan_then_the_setting(settings, fake_openai):
    settings.LUCIA_LLM = "scripted"
    settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY = fake_openai.base_url, "test-key"
    assert isinstance(providers.provider_for({"model": {"provider": "default"}}), ScriptedProvider)
    assert isinstance(providers.provider_for({"model": {"provider": "openai"}}), OpenAIProvider)
    assert providers.provider_for({}) is providers.provider_for({"model": {"provider": "scripted"}})
    settings.LUCIA_LLM = "openai"
    assert isinstance(providers.provider_for({}), OpenAIProvider)
    assert providers.model_name({"model": {"name": "gpt-4.1-mini"}}) == "gpt-4.1-mini"
    assert providers.model_name({"model": {"provider": "scripted", "name": "gpt-4.1"}}) == MODEL_NAME
    with pytest.raises(ValueError):
        providers.provider_for({"model": {"provider": "anthropic"}})
