"""Reading config YAML safely and predictably.

PyYAML follows YAML 1.1, where `no` is false (a Norwegian language code
becomes a boolean), `17:00` is the integer 1020 and `2030-03-15` a date. The
loader here resolves plain scalars like YAML 1.2's core schema instead:
only true/false are booleans, only decimal/hex/octal-looking numbers are
numbers, and everything else stays a string. Duplicate keys are an error
instead of "last one wins".
"""

from __future__ import annotations

import re

import yaml

MAX_SOURCE_CHARS = 200_000

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class SourceError(ValueError):
    """Unreadable YAML; `line` and `column` are 1-based when known."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(_INT, re.compile(r"^(?:[-+]?(?:0|[1-9][0-9]*)|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
_Loader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+.0123456789"),
)


def load(text: str) -> object:
    """The single YAML document in `text` as plain Python data; raises SourceError."""
    if len(text) > MAX_SOURCE_CHARS:
        raise SourceError(f"config is longer than {MAX_SOURCE_CHARS} characters")
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = ", ".join(part for part in (error.context, error.problem) if part) or "invalid YAML"
        if mark is None:
            raise SourceError(problem) from None
        raise SourceError(
            f"{problem} at line {mark.line + 1}, column {mark.column + 1}", line=mark.line + 1, column=mark.column + 1
        ) from None
    except (yaml.YAMLError, ValueError, RecursionError) as error:
        raise SourceError(f"unreadable YAML: {error}") from None
