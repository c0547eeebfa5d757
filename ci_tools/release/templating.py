"""Jinja environment over ``templates/``: Python decides what, templates decide how it looks."""

from __future__ import annotations

import functools

import jinja2

from ..compile.records import verdict_label
from ..paths import TEMPLATES


@functools.lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    e = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                           trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                           autoescape=False)  # noqa: S701 - Markdown and YAML, not HTML
    e.filters["mb"] = lambda n: f"{(n or 0) / 1e6:.2f} MB"
    e.filters["verdict"] = verdict_label  # a record or a manifest asset (verified, verified_on)
    # a Markdown table cell: one line, no column break
    e.filters["cell"] = lambda s: " ".join(str(s).split()).replace("|", "\\|")
    return e


def render(name: str, **context) -> str:
    return env().get_template(name).render(**context)
