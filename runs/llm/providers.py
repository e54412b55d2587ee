"""Which model drives a run: the plan's `model.provider`, where `default` means the LUCIA_LLM setting."""

from __future__ import annotations

import threading
from datetime import datetime

from django.conf import settings

from runs.llm import simulated_outages
from runs.llm.base import ModelProvider
from runs.llm.scripted import MODEL_NAME as SCRIPTED_MODEL_NAME
from runs.llm.scripted import ScriptedProvider

PROVIDERS = ("scripted", "openai")

# One instance per configuration: the OpenAI client keeps a connection pool worth reusing.
_instances: dict[tuple, ModelProvider] = {}
_lock = threading.Lock()


def provider_name(plan: dict) -> str:
    """"scripted" or "openai" for this plan."""
    name = (plan.get("model") or {}).get("provider") or "default"
    if name == "default":
        name = settings.LUCIA_LLM
    if name not in PROVIDERS:
        raise ValueError(f"unknown model provider {name!r}; expected one of {', '.join(PROVIDERS)}")
    return name


def model_name(plan: dict) -> str:
    """The model a request for this plan names: the plan's `model.name`, else LUCIA_MODEL."""
    if provider_name(plan) == "scripted":
        return SCRIPTED_MODEL_NAME
    return (plan.get("model") or {}).get("name") or settings.LUCIA_MODEL


def provider_for_run(plan: dict, *, run_id: int, at: datetime) -> ModelProvider:
    """The plan's provider as a run's episode at `at` meets it: failing inside an outage the simulator armed."""
    return simulated_outages.wrap(provider_for(plan), run_id=run_id, at=at)


def provider_for(plan: dict) -> ModelProvider:
    name = provider_name(plan)
    # Keyed by the settings in force, so a changed base URL or key (tests, reconfiguration) gets a new client.
    key = (name, settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY, settings.LUCIA_MODEL_TIMEOUT_S)
    with _lock:
        if key not in _instances:
            _instances[key] = _build(name)
        return _instances[key]


def _build(name: str) -> ModelProvider:
    if name == "scripted":
        return ScriptedProvider()
    # Imported on first use: a scripted-only deployment never loads the openai client.
    from runs.llm.openai_provider import OpenAIProvider

    return OpenAIProvider()
