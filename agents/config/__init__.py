"""Agent config: the YAML schema, its validation, and compilation to a plan.

    from agents import config
    result = config.validate_source(yaml_text)
    if result.ok:
        plan = config.compile_config(result.config)
        digest = config.config_hash(plan)

Pure Python: no Django models, no database.
"""

from agents.config.compiler import PLAN_SCHEMA, compile_config, config_hash
from agents.config.errors import ConfigError
from agents.config.schema import TOOL_NAMES, AgentConfig
from agents.config.schema_base import CHANNEL_CONTACT_FIELD, CHANNELS
from agents.config.validation import ValidationResult, validate_data, validate_source

__all__ = [
    "CHANNELS",
    "CHANNEL_CONTACT_FIELD",
    "PLAN_SCHEMA",
    "TOOL_NAMES",
    "AgentConfig",
    "ConfigError",
    "ValidationResult",
    "compile_config",
    "config_hash",
    "validate_data",
    "validate_source",
]
