"""Where in the YAML a config error is: its path ("followup.steps[2].channel") mapped to a 1-based line.

The editor marks these lines. A path that stops existing part way (a missing
key, an index past the end) points at the deepest part that exists, since
that is where the builder has to add something. YAML syntax errors carry
their line in the message; errors about the whole config have none.
"""

from __future__ import annotations

import re

import yaml

from agents.config import errors

_PART = re.compile(r'\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]|\.?([A-Za-z0-9_-]+)')
_SYNTAX_LINE = re.compile(r"line (\d+), column \d+")


def parse_path(path: str) -> list[str | int] | None:
    """The parts of a path as errors.format_path writes it; None for <root>, <yaml> or a path it cannot read."""
    if path in (errors.ROOT, errors.YAML) or not path:
        return None
    parts: list[str | int] = []
    position = 0
    while position < len(path):
        match = _PART.match(path, position)
        if match is None or match.end() == position:
            return None
        index, quoted, plain = match.groups()
        parts.append(int(index) if index is not None else (quoted if quoted is not None else plain))
        position = match.end()
    return parts


def line_for(source: str, *, path: str, message: str = "") -> int | None:
    """The 1-based line of `source` that the error at `path` is about, or None when no line fits."""
    if path == errors.YAML or not path:
        found = _SYNTAX_LINE.findall(message)
        return int(found[-1]) if found else None
    parts = parse_path(path)
    if not parts:
        return None
    try:
        node = yaml.compose(source, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for part in parts:
        child = _child(node, part)
        if child is None:
            break
        key_line, node = child
        line = key_line
    return line


def _child(node: yaml.Node | None, part: str | int) -> tuple[int, yaml.Node] | None:
    """(the line naming `part`, the node under it) inside a mapping or sequence node."""
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                return key.start_mark.line + 1, value
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        item = node.value[part]
        return item.start_mark.line + 1, item
    return None
