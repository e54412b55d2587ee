"""Config errors as builders read them: a path into their YAML, what is wrong, how to fix it.

Pydantic's errors are translated here: locations become dotted/indexed paths
("followup.steps[2].channel"), the tags pydantic inserts for tagged unions are
dropped, and each error type gets a hint (the closest valid key for a typo,
the allowed values for an enum).
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import asdict, dataclass
from difflib import get_close_matches

from pydantic import BaseModel, ValidationError

ROOT = "<root>"
YAML = "<yaml>"

Loc = list[str | int]


@dataclass(frozen=True)
class ConfigError:
    path: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message} (hint: {self.hint})"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def format_path(loc: Loc) -> str:
    """["followup", "steps", 2, "channel"] → "followup.steps[2].channel"; [] → "<root>"."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            path += f".{part}" if path else part
        else:
            path += f'["{part}"]'
    return path or ROOT


def from_pydantic(error: ValidationError, *, data: object, model: type[BaseModel]) -> list[ConfigError]:
    """One ConfigError per pydantic error, paths relative to `data` (the input that failed)."""
    found = []
    for item in error.errors(include_url=False):
        loc = _clean_loc(item["loc"], data=data)
        message, hint = _describe(item, loc=loc, model=model, data=data)
        found.append(ConfigError(format_path(loc), message, hint))
    return found


def _clean_loc(raw: tuple[str | int, ...], *, data: object) -> Loc:
    loc: Loc = []
    node = data
    for part in raw:
        if part == "[key]":  # pydantic marks an invalid dict key; the key itself is already in the path
            continue
        if isinstance(node, dict) and isinstance(part, str) and part not in node and node.get("type") == part:
            continue  # a tagged-union tag pydantic inserts; it is not a key the builder wrote
        loc.append(part)
        node = _child(node, part=part)
    return loc


def _child(node: object, *, part: str | int) -> object:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None


def suggest(name: object, *, known: list[str], kind: str) -> str:
    """A hint for a name that refers to nothing: the closest known one, or the list."""
    close = get_close_matches(str(name), known, n=1)
    if close:
        return f"did you mean {close[0]}?"
    return f"use one of: {', '.join(known)}" if known else f"declare a {kind} first"


def _describe(item: dict, *, loc: Loc, model: type[BaseModel], data: object) -> tuple[str, str]:
    kind, ctx, value = item["type"], item.get("ctx") or {}, item.get("input")
    if "hint" in ctx:
        return item["msg"], ctx["hint"]
    if kind == "missing":
        return f"{loc[-1]!s} is required" if loc else "a value is required", f"add `{loc[-1]}:`" if loc else ""
    if kind == "extra_forbidden":
        return _unknown_key(loc, model=model, data=data)
    if kind == "literal_error":
        return f"{_brief(value)} is not allowed", f"use one of: {_options(ctx['expected'])}"
    if kind == "union_tag_invalid":
        return f"unknown type {ctx['tag']!r}", f"use one of: {_options(ctx['expected_tags'])}"
    if kind == "union_tag_not_found":
        return "`type` is missing", f"add `type:` with one of: {_options(_tags_at(loc, model=model, data=data))}"
    return item["msg"], _TYPE_HINTS.get(kind, _generic_hint(kind))


_TYPE_HINTS = {
    "string_type": "write text (quote it if YAML reads it as a number or a date)",
    "int_type": "write a whole number, e.g. 3",
    "float_type": "write a number, e.g. 0.2",
    "bool_type": "write true or false",
    "list_type": "write a YAML list, e.g. [a, b] or one '- item' per line",
    "dict_type": "write a mapping of key: value lines",
    "model_type": "write a mapping of key: value lines",
    "string_too_long": "shorten it",
    "too_short": "add at least one item",
    "too_long": "remove items",
}


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _generic_hint(kind: str) -> str:
    if kind.startswith(("greater_than", "less_than")):
        return "use a value inside the allowed range"
    if kind == "string_pattern_mismatch":
        return "check the format"
    return "see the agent config reference"


def _options(expected: str) -> str:
    """Turn pydantic's "'email', 'sms' or 'voice'" into "email, sms, voice"."""
    return ", ".join(re.findall(r"'([^']*)'", expected)) or expected


def _unknown_key(loc: Loc, *, model: type[BaseModel], data: object) -> tuple[str, str]:
    key = str(loc[-1])
    owner = model_at(model, loc=loc[:-1], data=data)
    valid = sorted(_keys(owner)) if owner else []
    message = f"unknown key {key!r}"
    close = get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return message, f"did you mean `{close[0]}`?"
    return message, f"remove it; valid keys here: {', '.join(valid)}" if valid else "remove it"


def _keys(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


def _tags_at(loc: Loc, *, model: type[BaseModel], data: object) -> str:
    # Find the union at `loc` by walking its parent, then list its members' tags.
    parent = model_at(model, loc=loc[:-1], data=data)
    if parent is None or not isinstance(loc[-1], str):
        return ""
    annotation = _field_annotation(parent, key=loc[-1])
    return ", ".join(repr(tag) for member in _union_members(annotation) for tag in _tags(member))


def model_at(model: type[BaseModel], *, loc: Loc, data: object) -> type[BaseModel] | None:
    """The model class that validates the mapping at `loc` inside `data`, if there is one."""
    annotation: object = model
    node = data
    for part in loc:
        current = _pick_model(annotation, node=node)
        if current is not None:
            if not isinstance(part, str):
                return None
            annotation = _field_annotation(current, key=part)
        else:
            annotation = _item_annotation(annotation)
        node = _child(node, part=part)
        if annotation is None:
            return None
    return _pick_model(annotation, node=node)


def _field_annotation(model: type[BaseModel], *, key: str) -> object:
    for name, field in model.model_fields.items():
        if key in (name, field.alias):
            return field.annotation
    return None


def _item_annotation(annotation: object) -> object:
    args = [a for a in typing.get_args(_strip(annotation)) if a is not type(None)]
    origin = typing.get_origin(_strip(annotation))
    if origin in (list, tuple) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    if _is_union(annotation) and len(args) == 1:
        return _item_annotation(args[0])
    return None


def _pick_model(annotation: object, *, node: object) -> type[BaseModel] | None:
    members = _union_members(annotation)
    if len(members) > 1 and isinstance(node, dict):
        members = [m for m in members if node.get("type") in _tags(m)]
    return members[0] if len(members) == 1 else None


def _tags(model: type[BaseModel]) -> tuple[str, ...]:
    field = model.model_fields.get("type")
    return typing.get_args(field.annotation) if field else ()


def _union_members(annotation: object) -> list[type[BaseModel]]:
    annotation = _strip(annotation)
    candidates = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    return [c for c in map(_strip, candidates) if isinstance(c, type) and issubclass(c, BaseModel)]


def _strip(annotation: object) -> object:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_union(annotation: object) -> bool:
    return typing.get_origin(_strip(annotation)) in (typing.Union, types.UnionType)
