"""Load YAML and remember the line of every key and item, so errors can name them.

Duplicate keys are an error here (PyYAML silently keeps the last one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

Loc = tuple[Any, ...]


def load_with_lines(path: Path, what: str = "file") -> tuple[Any, dict[Loc, int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what}", hint="pass --matrix with an existing file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read {what}: {e}") from None
    loader = yaml.SafeLoader(text)
    lines: dict[Loc, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError(f"{path}: the {what} is empty",
                              hint="see matrix/models.yaml in the repository for an example")
        data = _convert(node, (), (), _Walk(loader=loader, path=path, lines=lines, budget=[_MAX_NODES]))
    except RecursionError:
        raise ConfigError(f"{path}: the YAML is nested too deeply", hint="flatten the structure") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        problem = (e.problem or e.context or "invalid YAML").strip()
        raise ConfigError(f"{path}:{line}: YAML syntax error: {problem}",
                          hint="check indentation and quoting on that line") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: YAML error: {str(e).splitlines()[0]}") from None
    finally:
        loader.dispose()
    return data, lines


# aliases can make a tiny file expand to billions of nodes ("billion laughs")
_MAX_NODES = 200_000


@dataclass(frozen=True, kw_only=True)
class _Walk:
    """What every node of one file's conversion shares: the loader, the file (for messages), the line of every key
    and item found so far, and the nodes still allowed (``budget[0]``)."""

    loader: yaml.SafeLoader
    path: Path
    lines: dict[Loc, int]
    budget: list[int]


def _convert(node: yaml.Node, loc: Loc, stack: tuple[int, ...], walk: _Walk) -> Any:
    """``node`` (at ``loc``; ``stack``: the nodes it is inside) as Python values, its lines in ``walk.lines``."""
    lines, loader, path, budget = walk.lines, walk.loader, walk.path, walk.budget
    line = node.start_mark.line + 1
    if id(node) in stack:
        raise ConfigError(f"{path}:{line}: a YAML alias refers to itself", hint="remove the recursive '*' alias")
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(f"{path}:{line}: the YAML expands to too many nodes", hint="do not nest aliases")
    stack = (*stack, id(node))
    lines[loc] = line
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise ConfigError(f"{path}:{key_node.start_mark.line + 1}: a key must be a string, got {key!r}",
                                  hint="quote it, or fix the indentation")
            if key in out:
                raise ConfigError(f"{path}:{key_node.start_mark.line + 1}: duplicate key '{key}'",
                                  hint=f"it is already set on line {lines[loc + (key,)]}")
            lines[loc + (key,)] = key_node.start_mark.line + 1
            out[key] = _convert(value_node, loc + (key,), stack, walk)
            lines[loc + (key,)] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, loc + (i,), stack, walk) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def line_of(lines: dict[Loc, int], loc: Loc) -> int:
    """The line of ``loc``, or of its nearest ancestor present in the file."""
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get((), 1)
