"""The unit tier: what a contributor runs after every edit (`python -m pytest tests/unit`, under a minute on
2 cores). Every test here runs with no other program and no network, and never compiles: the guard below
fails a test that starts a subprocess (``ci_tools.util.cmd.run`` or subprocess directly), opens any socket
connection (loopback too: local stand-in servers are end-to-end), or loads the QNN execution provider. A test
that needs any of them belongs in tests/ (the end-to-end tier)."""

from __future__ import annotations

import socket
import subprocess

import pytest


class NotInTheUnitTier(AssertionError):
    pass


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise NotInTheUnitTier(f"a unit test {what}: move it to tests/ (the end-to-end tier)")

    return refuse


@pytest.fixture(autouse=True, scope="package")
def _no_subprocess_network_or_compile():
    """For the whole unit package, set up before its tests' module and function fixtures (one that builds or
    downloads fails here too), and undone when the run moves on to the end-to-end tests in the same process
    (a session-scoped guard would stay on for them)."""
    patch = pytest.MonkeyPatch()
    patch.setattr(subprocess.Popen, "__init__", _refuse("started a subprocess"))
    patch.setattr(socket.socket, "connect", _refuse("opened a network connection"))
    import ci_tools.compile.qnn_ep as qnn_ep

    patch.setattr(qnn_ep, "_ort", _refuse("loaded the QNN execution provider (a compile or an emulator run)"))
    yield
    patch.undo()
