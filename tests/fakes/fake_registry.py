"""A local HTTP server standing in for GHCR's side of the Docker Registry token protocol, as the guard uses it.

Rule by rule, with the evidence:
- ``GET /token?service=<host>&scope=repository:<name>:pull`` answers ``{"token": ...}``. Anonymously only for a
  public package (richlander/container-registry-api ghcr.md: public images take "a no-op token", asked for at
  repo scope); an anonymous request for a private or missing one is denied with 401 ``UNAUTHORIZED`` (toddysm.com,
  "Authenticating with OCI Registries - GHCR": the anonymous request "is denied"). With basic auth
  ``<user>:<token>`` (GHCR takes a token as the password: the same page and the 2024 Q&A it cites) it answers a
  token when the credentials are right, 401 otherwise.
- ``GET /v2/<name>/tags/list`` with ``Authorization: Bearer <token>``: 200 ``{"name", "tags"}`` when the token
  may read the package, 404 ``NAME_UNKNOWN`` when there is no such package (distribution spec, error codes),
  403 ``DENIED`` when it exists but the token's repository has no access to it.
- ``fail``: every answer is 503, a registry that cannot say.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from tests.fakes.local_server import LocalServer


@dataclass
class Package:
    visibility: str  # "public" or "private"
    readers: set[str] = field(default_factory=set)  # users whose token may read it (the repository's actor)


@dataclass
class State:
    user: str
    password: str
    packages: dict[str, Package] = field(default_factory=dict)
    tokens: dict[str, str | None] = field(default_factory=dict)  # bearer token -> user (None: anonymous)
    fail: bool = False
    seen_authorization: list[str] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str) -> None:
        self._send(status, {"errors": [{"code": code, "message": code.lower()}]})

    def do_GET(self):
        st: State = self.server.state
        auth = self.headers.get("Authorization", "")
        st.seen_authorization.append(auth)
        if st.fail:
            return self._error(503, "UNAVAILABLE")
        url = urlparse(self.path)
        if url.path == "/token":
            name = parse_qs(url.query).get("scope", [""])[0].removeprefix("repository:").removesuffix(":pull")
            user = None
            if auth.startswith("Basic "):
                u, _, p = base64.b64decode(auth[6:]).decode().partition(":")
                if (u, p) != (st.user, st.password):
                    return self._error(401, "UNAUTHORIZED")
                user = u
            pkg = st.packages.get(name)
            if user is None and (pkg is None or pkg.visibility != "public"):
                return self._error(401, "UNAUTHORIZED")
            token = secrets.token_hex(8)
            st.tokens[token] = user
            return self._send(200, {"token": token})
        if url.path.startswith("/v2/") and url.path.endswith("/tags/list"):
            name = url.path[len("/v2/"):-len("/tags/list")]
            token = auth.removeprefix("Bearer ")
            if token not in st.tokens:
                return self._error(401, "UNAUTHORIZED")
            pkg = st.packages.get(name)
            if pkg is None:
                return self._error(404, "NAME_UNKNOWN")
            user = st.tokens[token]
            if pkg.visibility != "public" and user not in pkg.readers:
                return self._error(403, "DENIED")
            return self._send(200, {"name": name, "tags": ["2.40.0.251030-0123456789ab"]})
        return self._error(404, "NOT_FOUND")


class FakeRegistry(LocalServer):
    def __init__(self, user: str = "github-actions", password: str = "ghs_" + "x" * 36):
        super().__init__(Handler, State(user=user, password=password))
