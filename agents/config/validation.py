"""Validate agent config YAML: every problem at once, never an exception for bad input."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from agents.config import errors, semantics, source
from agents.config.errors import ConfigError
from agents.config.schema import AgentConfig


@dataclass(frozen=True)
class ValidationResult:
    """`config` is set only when `errors` is empty."""

    errors: list[ConfigError] = field(default_factory=list)
    config: AgentConfig | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict:
        return {"ok": self.ok, "errors": [error.as_dict() for error in self.errors]}


def validate_source(yaml_text: str) -> ValidationResult:
    """Parse and validate config YAML as a builder wrote it."""
    if not isinstance(yaml_text, str):
        kind = type(yaml_text).__name__
        return _fail(ConfigError(errors.ROOT, f"the config must be text, not {kind}", "pass the YAML as a str"))
    if not yaml_text.strip():
        return _fail(ConfigError(errors.ROOT, "the config is empty", "start with `slug: my-agent` and `name: ...`"))
    try:
        data = source.load(yaml_text)
    except source.SourceError as error:
        hint = error.hint or "fix the YAML syntax; indent with spaces, quote odd values"
        return _fail(ConfigError(error.path or errors.YAML, str(error), hint))
    return validate_data(data)


def validate_data(data: object) -> ValidationResult:
    """Validate already-parsed config data (a mapping, e.g. from a JSON request body)."""
    if data is None:
        return _fail(ConfigError(errors.ROOT, "the config is empty", "start with `slug: my-agent` and `name: ...`"))
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else type(data).__name__
        return _fail(ConfigError(errors.ROOT, f"the config must be a mapping, not {kind}", "write `key: value` lines"))
    found: list[ConfigError] = []
    config = None
    try:
        config = AgentConfig.model_validate(data)
    except ValidationError as error:
        found += errors.from_pydantic(error, data=data, model=AgentConfig)
    found += _unique(semantics.check(data), seen=found)
    return ValidationResult(errors=found, config=None if found else config)


def _fail(error: ConfigError) -> ValidationResult:
    return ValidationResult(errors=[error])


def _unique(candidates: list[ConfigError], *, seen: list[ConfigError]) -> list[ConfigError]:
    # Two rules may reach the same conclusion about one spot; say it once.
    known = set(seen)
    fresh = []
    for error in candidates:
        if error not in known:
            known.add(error)
            fresh.append(error)
    return fresh
