"""One error hierarchy; each class has its own exit code, caught once in ``cli.main``.

The message is one line naming the file/key/input and what was expected; ``hint``
says what to do about it.
"""

from __future__ import annotations


class QnnReleaseError(Exception):
    """Any other failure the tool explains (the base of the classes below)."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details  # structured facts for the build report (a diagnosis, per-output numbers)
        self.rejected: list[tuple[str, str]] = []  # (op type, node) a compile route named as unsupported

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class ConfigError(QnnReleaseError):
    """The matrix file or the chip catalog is wrong."""

    exit_code = 2


class UsageError(QnnReleaseError):
    """A command-line argument is wrong (argparse uses 2 for this too)."""

    exit_code = 2


class NoBuildForChip(QnnReleaseError):
    """No NPU build fits the device: apps branch on this and use the CPU model."""

    exit_code = 3


class SourceError(QnnReleaseError):
    """A model source could not be fetched, or its sha256 does not match its pin."""

    exit_code = 4


class PrepareError(QnnReleaseError):
    """A graph could not be made ready for HTP (static shapes, rewrites), or no longer agrees with its source on CPU."""

    exit_code = 5


class CompileError(QnnReleaseError):
    """A compile route refused a graph for a chip (the nodes HTP rejects are named) or failed."""

    exit_code = 6


class VerifyError(QnnReleaseError):
    """A binary does not agree with ONNX Runtime on CPU (on the emulator, or on a device)."""

    exit_code = 7


class BuildFailed(QnnReleaseError):
    """Some targets of a build failed (the report says which)."""

    exit_code = 8


class PackageError(QnnReleaseError):
    """A release cannot be packaged (a missing or inconsistent target, a refused archive, a malformed manifest)."""

    exit_code = 9


class PublishError(QnnReleaseError):
    """GitHub refused a request, or a release, tag or asset is not there."""

    exit_code = 10


class RuntimeTooOld(QnnReleaseError):
    """The release's binary for the device needs a newer QNN runtime than the app ships (a binary of a newer QNN
    fails on an older runtime): ship the newer runtime, fetch an earlier release's binary, or use the CPU model."""

    exit_code = 12


class RegressionFound(QnnReleaseError):
    """``compare``: the new release is worse than the old one on some target (a verdict lost, a target gone or
    failing, SNR or cosine down, size or device latency up past the matrix's ``release.regressions``)."""

    exit_code = 13


class BackendUnavailable(QnnReleaseError):
    """The chosen compile route is not installed here (no onnxruntime-qnn, no QNN_SDK_ROOT)."""

    exit_code = 11
