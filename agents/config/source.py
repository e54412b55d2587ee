"""Reading config YAML safely and predictably.

PyYAML follows YAML 1.1, where `no` is false (a Norwegian language code
becomes a boolean), `17:00` is the integer 1020 and `2030-03-15` a date. The
loader here resolves plain scalars like YAML 1.2's core schema instead:
only true/false are booleans, only decimal/hex/octal-looking numbers are
numbers, and everything else stays a string. Duplicate keys are an error
instead of "last one wins". Keys must be plain scalars (a `? [a, b]` key is
an error with its path), and aliases may not expand the document past
MAX_VALUES values, so a small file cannot make validation walk billions.
"""

from __future__ import annotations

import re

import yaml

from agents.config import errors

MAX_SOURCE_CHARS = 200_000
# Counted with aliases expanded; real configs hold a few hundred values.
MAX_VALUES = 100_000

_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class SourceError(ValueError):
    """Unreadable YAML; `line` and `column` are 1-based when known; `path` is where in the data, when known."""

    def __init__(
        self, message: str, *, line: int | None = None, column: int | None = None, path: str = "", hint: str = ""
    ) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.path = path
        self.hint = hint


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
    loader = None
    try:
        loader = _Loader(text)  # the reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = ", ".join(part for part in (error.context, error.problem) if part) or "invalid YAML"
        if mark is None:
            raise SourceError(problem) from None
        raise SourceError(
            f"{problem} at line {mark.line + 1}, column {mark.column + 1}", line=mark.line + 1, column=mark.column + 1
        ) from None
    except SourceError:
        raise
    except (yaml.YAMLError, ValueError, RecursionError) as error:
        raise SourceError(f"unreadable YAML: {error}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _check_nodes(root: yaml.Node) -> None:
    """Refuse non-scalar mapping keys (with their path) and alias expansion past MAX_VALUES; iterative.

    A node's location is kept as a link to its parent's (made into a path only for an error): copying
    whole paths would make a deep or self-referencing alias (`a: &a [*a]`) quadratic.
    """
    stack: list[tuple[yaml.Node, tuple | None]] = [(root, None)]
    count = 0
    while stack:
        node, loc = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise SourceError(
                f"the config expands to more than {MAX_VALUES} values",
                hint="aliases (*name) repeat what they point to; write the values out or use fewer aliases",
            )
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                    mark = key_node.start_mark
                    raise SourceError(
                        f"a key must be plain text, not a {kind} (line {mark.line + 1}, column {mark.column + 1})",
                        line=mark.line + 1, column=mark.column + 1, path=errors.format_path(_path(loc)),
                        hint="write `name: value`; quote a key that contains brackets or braces",
                    )
                stack.append((value_node, (loc, key_node.value)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (loc, index)) for index, item in enumerate(node.value))


def _path(loc: tuple | None) -> list[str | int]:
    parts: list[str | int] = []
    while loc is not None:
        loc, part = loc
        parts.append(part)
    return parts[::-1]
