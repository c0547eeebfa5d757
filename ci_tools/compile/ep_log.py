"""What the QNN EP's log says: its error lines, the nodes it calls unsupported, and the cause behind a QNN
error code. Below both ``qnn_ep`` (which compiles) and ``doctor`` (which explains), so neither imports the other
back."""

from __future__ import annotations

import re

UNSUPPORTED = re.compile(r"\{ name: ([^,]*), type: ([\w.]+) \}")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOG_LINE = re.compile(r"^\S+ \S+ \[([EWIV]):onnxruntime:[^\]]*\] (.*)$")


QNN_ERRORS = {  # QNN error codes the EP passes on verbatim, with what they meant where we met them
    "7004": "QNN error 7004: HTP could not create a tensor, typically a quantized one with a degenerate scale "
            "(a size, index or axis input quantized as an activation, e.g. a Resize's scales at scale 1e-9) or a "
            "tensor too large for it: compare the node named with the QDQ graph (`*.qdq.onnx` beside the prepared "
            "graph); prepare makes Constant nodes initializers and the quantizer leaves shape inputs alone",
}


def qnn_error_hint(message: str) -> str | None:
    """The cause behind a QNN error code in an EP message, where one is known."""
    for code, hint in QNN_ERRORS.items():
        if f"error code: {code}" in message or f"error code {code}" in message or f"Error {code}" in message:
            return hint
    return None


def log_errors(text: str) -> list[str]:
    """The EP's error lines from a captured log, without colours and timestamps."""
    out = []
    for line in ANSI.sub("", text).splitlines():
        m = LOG_LINE.match(line.strip())
        if m and m[1] == "E" and m[2] not in out:
            out.append(m[2])
    return out


def unsupported_from_log(text: str) -> list[tuple[str, str]]:
    """(op type, name) of every node the QNN EP's log calls unsupported (each logged once or more)."""
    seen: dict[str, str] = {}
    for line in text.splitlines():
        if "Unsupported nodes" in line:
            for name, op in UNSUPPORTED.findall(line):
                seen[name] = op
    return [(op, name) for name, op in seen.items()]
