"""qnn-release: compile ONNX graphs into QNN HTP context binaries for every Snapdragon chip, and release them.

The public Python API (imported lazily, so the CLI starts fast)::

    from ci_tools import load_catalog, load_matrix, fetch_model, AppNeeds, AdbPhone

    fetch_model("acme/models@v1.0.0", "silero-vad", dest=Path("models"), soc="SM8750",
                needs=AppNeeds(precision="fp16", runtime="2.40.0"))  # soc=AdbPhone(serial=None): the phone's chip

and one package per stage, in the order data flows (docs/contributors.md: "How the code is laid out"):
``ci_tools.matrix.plan.make_plan``, ``ci_tools.builder.orchestrate.build``,
``ci_tools.release.package.package`` (with its ``PackageSettings``), ``ci_tools.release.publish.publish``.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {
    "load_catalog": "ci_tools.catalog.socs",
    "load_matrix": "ci_tools.matrix.schema",
    "fetch_model": "ci_tools.release.fetch",
    "AppNeeds": "ci_tools.release.fetch",
    "AdbPhone": "ci_tools.release.fetch",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'ci_tools' has no attribute {name!r}")
