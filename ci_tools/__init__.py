"""qnn-release: compile ONNX graphs into QNN HTP context binaries for every Snapdragon chip, and release them.

The public Python API (imported lazily, so the CLI starts fast)::

    from ci_tools import load_catalog, load_matrix, fetch_model

and one module per stage: ``ci_tools.plan.plan``, ``ci_tools.build.build``,
``ci_tools.package.package``, ``ci_tools.publish.publish``.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {
    "load_catalog": "ci_tools.socs",
    "load_matrix": "ci_tools.matrix",
    "fetch_model": "ci_tools.fetch",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'ci_tools' has no attribute {name!r}")
