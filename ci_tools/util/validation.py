"""Turn pydantic validation errors into one-line ConfigErrors with file, line, key and hint."""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel
from pydantic_core import ErrorDetails

from ..errors import ConfigError
from .yaml_lines import Loc, line_of

M = typing.TypeVar("M", bound=BaseModel)

_KIND = {
    "int_type": "an integer", "int_parsing": "an integer", "float_type": "a number",
    "string_type": "a string", "bool_type": "true or false", "list_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
    "tuple_type": "a list",
}


def validate(cls: type[M], data: Any, lines: dict[Loc, int], path: Path, default_hint: str | None = None) -> M:
    try:
        return cls.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        e = error_at(path, lines, data, cls, tuple(err["loc"]), _message(err, cls, data))
        e.hint = e.hint or default_hint
        raise e from None


def error_at(path: Path, lines: dict[Loc, int], data: Any, root: type, loc: Loc,
             message: tuple[str, str | None]) -> ConfigError:
    """The ``ConfigError`` for ``message`` (text, hint: "" for none, None for the field's description) at ``loc``
    of ``data`` (validated as ``root``), naming the file and line."""
    data_loc = data_path(data, loc)
    text, hint = message
    if hint == "":
        hint = None
    elif hint is None:
        info = field_info_at(root, loc, data)
        hint = info.description if info is not None and info.description else None
    dotted = dotted_path(data_loc) or "(top level)"
    return ConfigError(f"{path}:{line_of(lines, data_loc)}: {dotted}: {text}", hint=hint)


def data_path(data: Any, loc: Loc) -> Loc:
    """Drop the parts of a pydantic loc (union tags) that are not keys of the data."""
    out: list[Any] = []
    cur = data
    for elem in loc:
        if isinstance(cur, dict) and isinstance(elem, str) and cur.get("kind") == elem:
            continue  # a discriminated union's tag (source kinds), not a key
        if isinstance(cur, dict) and elem in cur:
            cur = cur[elem]
            out.append(elem)
        elif isinstance(cur, list) and isinstance(elem, int) and 0 <= elem < len(cur):
            cur = cur[elem]
            out.append(elem)
        elif isinstance(cur, dict) and isinstance(elem, str) and elem not in _TAGS:
            out.append(elem)  # a missing key: name it, it does not exist yet
            break
    return tuple(out)


# regex -> what a human calls it; modules with patterned fields register theirs here
PATTERN_HINTS: dict[str, str] = {}

_TAGS = {"hf", "url", "path", "pip", "parts", "function-after", "function-before"}


def dotted_path(loc: Loc) -> str:
    s = ""
    for elem in loc:
        s += f"[{elem}]" if isinstance(elem, int) else (f".{elem}" if s else str(elem))
    return s


def _unwrap(t: Any) -> Any:
    while True:
        origin = typing.get_origin(t)
        if origin is typing.Annotated:
            t = typing.get_args(t)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(t) if a is not type(None)]
            if len(args) != 1:
                return t
            t = args[0]
        else:
            return t


def field_info_at(root: type, loc: Loc, data: Any = None) -> Any:
    """The pydantic FieldInfo of the last model field on ``loc`` (for descriptions and suggestions); ``data``, the
    document validated, picks a recipe's own model where a field holds one (by its ``kind``)."""
    t: Any = root
    info = None
    for elem in loc:
        t = _variant(_unwrap(t), data)
        origin = typing.get_origin(t)
        if isinstance(t, type) and issubclass(t, BaseModel):
            f = t.model_fields.get(elem) if isinstance(elem, str) else None
            if f is None:
                return info
            info, t = f, f.annotation
        elif origin in (list, tuple):
            t = typing.get_args(t)[0]
        elif origin is dict:
            t = typing.get_args(t)[1]
        elif origin in (typing.Union, types.UnionType):
            t = next((a for a in typing.get_args(t) if _tag_of(a) == elem), None)
            if t is None:
                return info
        else:
            return info
        data = _child(data, elem)
    return info


def fields_at(root: type, loc: Loc, data: Any = None) -> list[str]:
    t: Any = root
    for elem in loc:
        t = _variant(_unwrap(t), data)
        origin = typing.get_origin(t)
        if isinstance(t, type) and issubclass(t, BaseModel):
            f = t.model_fields.get(elem) if isinstance(elem, str) else None
            if f is None:
                return []
            t = f.annotation
        elif origin in (list, tuple):
            t = typing.get_args(t)[0]
        elif origin is dict:
            t = typing.get_args(t)[1]
        elif origin in (typing.Union, types.UnionType):
            t = next((a for a in typing.get_args(t) if _tag_of(a) == elem), None)
        data = _child(data, elem)
    t = _variant(_unwrap(t), data)
    if isinstance(t, type) and issubclass(t, BaseModel):
        return list(t.model_fields)
    return []


def _child(data: Any, elem: Any) -> Any:
    if isinstance(data, dict):
        return data.get(elem)
    if isinstance(data, list) and isinstance(elem, int) and 0 <= elem < len(data):
        return data[elem]
    return None


def _variant(t: Any, data: Any) -> Any:
    """For a base whose subclasses hold the fields (a recipe's tagged part: it has ``variants()``), the model of
    the ``kind`` the data names; else ``t``."""
    variants = getattr(t, "variants", None) if isinstance(t, type) else None
    if not callable(variants) or not isinstance(data, dict):
        return t
    return variants().get(data.get("kind"), t)


def _tag_of(t: Any) -> Any:
    if isinstance(t, type) and issubclass(t, BaseModel) and "kind" in t.model_fields:
        args = typing.get_args(t.model_fields["kind"].annotation)
        return args[0] if args else None
    return None


def first_error(e: Any) -> tuple[str, str]:
    """A pydantic ValidationError's first error as (its dotted place, its message): how a file this version
    cannot read, or a value that would break its schema, is said in one line."""
    err = e.errors(include_url=False)[0]
    return ".".join(map(str, err["loc"])), err["msg"]


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str | None:
    match = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else None


def _message(err: ErrorDetails, root: type, data: Any = None) -> tuple[str, str | None]:
    typ, loc, value = err["type"], tuple(err["loc"]), err.get("input")
    ctx = err.get("ctx") or {}
    if typ == "extra_forbidden":
        allowed = fields_at(root, loc[:-1], data)
        return (f"unknown key '{loc[-1]}'",
                did_you_mean(str(loc[-1]), allowed) or f"allowed keys: {', '.join(allowed)}")
    if typ == "missing":
        return f"missing required key '{loc[-1]}'", None
    if typ in ("literal_error", "enum"):
        found = re.findall(r"'([^']*)'|\b(\d+)\b", str(ctx.get("expected", "")))
        allowed = [a or b for a, b in found]
        quoted = (isinstance(value, str) and value in allowed) or str(value) in allowed
        return (f"expected one of {', '.join(allowed)}, got {value!r}",
                "write it without quotes" if quoted else did_you_mean(str(value), allowed) or None)
    if typ in ("union_tag_invalid", "union_tag_not_found"):
        info = field_info_at(root, loc)
        tags = [str(_tag_of(a)) for a in typing.get_args(_unwrap(info.annotation))] if info else []
        got = ctx.get("tag")
        return (f"'kind' must be one of {', '.join(tags)}" + (f", got {got!r}" if got else ""),
                did_you_mean(str(got), tags) if got else "add 'kind: hf|url|path|pip'")
    if typ in ("greater_than", "greater_than_equal"):
        shape = "shape" in loc
        return (f"expected a {'fixed ' if shape else ''}positive number, got {value!r}",
                "static shapes only: every dimension is a fixed integer > 0" if shape else None)
    if typ == "string_pattern_mismatch":
        desc = PATTERN_HINTS.get(str(ctx.get("pattern")))
        return (f"expected {desc}, got {value!r}" if desc else f"{value!r} does not match {ctx.get('pattern')}"), None
    if typ in ("int_type", "int_parsing") and "shape" in loc:
        return (f"expected a fixed positive integer dimension, got {value!r}",
                "static shapes only: replace a named/dynamic dimension by its size (batch 1, a fixed chunk)")
    if typ == "string_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
        # YAML reads 000...0, 1e5 or an all-digit commit as a number: the value was meant as text
        return (f"expected a string, got {type(value).__name__} {value!r}",
                "YAML read it as a number: quote it (\"0000...\" for a sha256 or a commit)")
    if typ in _KIND:
        return f"expected {_KIND[typ]}, got {type(value).__name__} {value!r}", None
    if typ == "value_error":
        msg = str(ctx.get("error", err["msg"]))
        text, _, hint = msg.partition(" | hint: ")
        return text, hint or None
    if typ == "too_short":
        return f"expected at least {ctx.get('min_length')} item(s), got {ctx.get('actual_length')}", None
    if typ == "too_long":
        return f"expected at most {ctx.get('max_length')} item(s), got {ctx.get('actual_length')}", None
    return err["msg"], None
