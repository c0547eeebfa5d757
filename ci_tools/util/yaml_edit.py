"""Set scalar keys of one mapping in a YAML file by editing its text: comments, order and layout stay.

Values are replaced where they stand (block or flow style, ``null``, ``~`` or empty); missing keys
go after the mapping's last key, in its style. The result is parsed again and must say exactly
what the file said before plus the new values, or nothing is written.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _literal(value: str) -> str:
    """``value`` as a YAML scalar that reads back as the same string (quoted when plain would not)."""
    if _PLAIN.fullmatch(value) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)  # a JSON string is a double-quoted YAML scalar


def _node_at(node: yaml.Node, loc: tuple[Any, ...]) -> yaml.Node | None:
    for step in loc:
        if isinstance(step, int) and isinstance(node, yaml.SequenceNode) and 0 <= step < len(node.value):
            node = node.value[step]
        elif isinstance(step, str) and isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == step), None)
            if node is None:
                return None
        else:
            return None
    return node


def _data_at(data: Any, loc: tuple[Any, ...]) -> Any:
    for step in loc:
        data = data[step]
    return data


def set_scalars(path: Path, text: str, loc: tuple[Any, ...], values: dict[str, str]) -> str:
    """``text`` with ``values`` set in the mapping at ``loc`` (keys and list indexes)."""
    where = ".".join(str(s) for s in loc)
    fix = f"set {', '.join(f'{k}: {v}' for k, v in values.items())} under {where} by hand"
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        before = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    mapping = _node_at(root, loc) if root is not None else None
    if not isinstance(mapping, yaml.MappingNode) or not mapping.value:
        raise ConfigError(f"{path}: no mapping at {where}", hint=fix)
    newline = "\r\n" if "\r\n" in text else "\n"
    edits: list[tuple[int, int, str]] = []
    missing: list[tuple[str, str]] = []
    for key, value in values.items():
        node = _node_at(mapping, (key,))
        if node is None:
            missing.append((key, _literal(value)))
        elif not isinstance(node, yaml.ScalarNode):
            raise ConfigError(f"{path}: {where}.{key} is not a single value", hint=fix)
        else:
            start, end = node.start_mark.index, node.end_mark.index
            edits.append((start, end, (" " if start == end else "") + _literal(value)))
    if missing:
        last = mapping.value[-1][1]
        if mapping.flow_style:
            at = last.end_mark.index
            edits.append((at, at, "".join(f", {k}: {v}" for k, v in missing)))
        else:
            column = mapping.value[0][0].start_mark.column
            eol = text.find("\n", last.end_mark.index)
            at = len(text) if eol < 0 else eol + 1
            lines = "".join(f"{' ' * column}{k}: {v}{newline}" for k, v in missing)
            edits.append((at, at, (newline if eol < 0 else "") + lines))
    out = text
    for start, end, new in sorted(edits, reverse=True):
        out = out[:start] + new + out[end:]
    expected = copy.deepcopy(before)
    _data_at(expected, loc).update(values)
    try:
        ok = yaml.safe_load(out) == expected
    except yaml.YAMLError:
        ok = False
    if not ok:
        raise ConfigError(f"{path}: cannot write {', '.join(values)} into {where} without changing anything else",
                          hint=fix)
    return out
