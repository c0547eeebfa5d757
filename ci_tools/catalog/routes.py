"""What the installed compile route can target, known before compiling anything.

``plan`` asks this so a chip the route cannot compile is refused up front, naming what it
needs, instead of failing (or worse, producing a binary for another arch) in a compile job.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..util import qnn_version
from .socs import HTP_ARCHS, Soc

# onnxruntime-qnn's ParseHtpArchitecture accepts these htp_arch values (2.7.0 and its newest source
# stop at 81: "Invalid HTP architecture: 85"). `qnn-release socs --check` tests that this still holds.
ORT_EP_HTP_ARCHS = (68, 69, 73, 75, 79, 81)


@dataclass(frozen=True)
class Route:
    name: str  # ort | qairt
    label: str  # what the messages call it, e.g. "onnxruntime-qnn 2.7.0 (QNN 2.51.0)"
    qnn_version: str | None  # None: not installed here, or unknown
    htp_archs: tuple[int, ...] = HTP_ARCHS

    def refusal(self, soc: Soc) -> str | None:
        """Why this route cannot compile for ``soc``, or None."""
        needs = f"QNN >= {soc.qnn_min}" if soc.qnn_min else None
        if soc.htp_arch not in self.htp_archs:
            what = (needs + " and " if needs else "") + f"a route that accepts htp_arch {soc.htp_arch}"
            return (f"{soc.name} (HTP {soc.arch}) needs {what}; {self.label} accepts "
                    f"v{self.htp_archs[0]}-v{self.htp_archs[-1]}")
        if needs and self.qnn_version and qnn_version.numbers(self.qnn_version) < qnn_version.numbers(soc.qnn_min):
            return f"{soc.name} (HTP {soc.arch}) needs {needs}; {self.label} is older"
        return None

    @property
    def hint(self) -> str:
        if self.name == "ort":
            return "use --backend qairt with a QAIRT SDK that knows the chip, or leave it out (--soc)"
        return "pin a newer QAIRT in matrix/models.yaml (sdk.qairt) and `qnn-release sdk fetch`, or leave it out"


def detect(backend: str, qairt_pin: str | None = None) -> Route:
    """The route ``build --backend`` would use here, from package metadata only (nothing is loaded)."""
    if backend == "ort":
        try:
            from onnxruntime_qnn import build_and_package_info as info
        except ImportError:
            return Route("ort", "onnxruntime-qnn (not installed)", None, ORT_EP_HTP_ARCHS)
        return Route("ort", f"onnxruntime-qnn {info.__version__} (QNN {info.qnn_version})", str(info.qnn_version),
                     ORT_EP_HTP_ARCHS)
    if backend != "qairt":
        return Route(backend, backend, None)  # a route we know nothing about: it decides at compile time
    root = os.environ.get("QNN_SDK_ROOT")
    name = os.path.basename(os.path.normpath(root)) if root else None
    if name and re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        return Route("qairt", f"QAIRT {name} (QNN_SDK_ROOT)", name)
    if qairt_pin:
        return Route("qairt", f"QAIRT {qairt_pin} (the matrix's pin)", qairt_pin)
    return Route("qairt", "QAIRT (version unknown)", None)
