"""The model layer: providers (OpenAI-compatible, scripted), and journaled, replayable calls.

Only runs/llm/openai_provider.py imports `openai`. The agent loop builds a
`ChatRequest`, picks a provider with `providers.provider_for(plan)` and calls
`journaled.call_model(...)`, which replays a recorded reply or calls and records.
"""
