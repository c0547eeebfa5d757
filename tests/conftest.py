"""Shared fixtures. Unit tests may not reach the network: only loopback connections pass."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DEMO_MATRIX = REPO / "matrix" / "models.yaml"


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    real_connect = socket.socket.connect

    def guarded(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and self.family in (socket.AF_INET, socket.AF_INET6):
            try:
                ok = ipaddress.ip_address(host).is_loopback
            except ValueError:
                ok = host == "localhost"
            if not ok:
                raise AssertionError(f"a test tried to reach {address}: tests may only use local servers")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real console entry point in a child process, as a user would."""
    return subprocess.run([sys.executable, "-m", "ci_tools", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, env=env, timeout=900)
