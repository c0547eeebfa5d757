"""A local HTTP server standing in for the Hugging Face Hub's download API (used through HF_ENDPOINT),
and for PyPI's JSON API.

Hub contract followed (what huggingface_hub relies on): ``HEAD``/``GET /{repo}/resolve/{revision}/{file}``
answering ``X-Repo-Commit``, ``X-Linked-Etag`` (the sha256 of an LFS file), ``X-Linked-Size`` and
``ETag``; ``GET /api/models/{repo}/tree/{revision}`` listing files with their ``lfs.oid``;
``X-Error-Code: EntryNotFound`` / ``RepoNotFound`` with 404s; uploads through
``POST /api/models/{repo}/preupload/{revision}`` (this stand-in answers uploadMode "regular" for
every file: it does not implement the LFS/Xet transfer the real Hub asks for large binaries) and
``POST /api/models/{repo}/commit/{revision}`` (NDJSON: header, then base64 files), which needs the
token. PyPI: ``GET /pypi/{name}/json``.
A file can be served corrupted (same size, other bytes) to test checksum handling.

File GETs honour ``Range: bytes=N-`` (206 with ``Content-Range``, 416 past the end), as the Hub's
resolve endpoint and the CDN it redirects to do (huggingface_hub's own download resumes with it).
Faults can be injected per request (``FakeHub.fault``): a status (500, 503, or 429 with
``Retry-After``, the Hub's answers when overloaded or rate limiting), a connection closed before
any answer (``drop``), or after half the body (``drop-mid-body``).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote, urlparse

from tests.fakes.local_server import LocalServer


class HubState:
    def __init__(self):
        self.repos: dict[str, dict] = {}  # repo -> {"commit": sha, "files": {name: bytes}}
        self.corrupt: set[str] = set()
        self.pypi: dict[str, list[str]] = {}
        self.log: list[tuple[str, str]] = []
        self.token = "hf_test_token_0123456789"
        self.commits: list[dict] = []
        self.faults: list[dict] = []
        self.lock = threading.Lock()

    def take_fault(self, method: str, path: str) -> dict | None:
        with self.lock:
            for f in self.faults:
                if f["count"] > 0 and f["method"] == method and re.search(f["path"], path):
                    f["count"] -= 1
                    return f
        return None

    def add_file(self, repo: str, name: str, data: bytes) -> str:
        r = self.repos.setdefault(repo, {"files": {}})
        r["files"][name] = data
        r["commit"] = hashlib.sha1(json.dumps(sorted((k, hashlib.sha256(v).hexdigest())
                                                     for k, v in r["files"].items())).encode()).hexdigest()
        return r["commit"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    @property
    def st(self) -> HubState:
        return self.server.state  # type: ignore[attr-defined]

    def _send(self, code, body=b"", headers=None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self):
        self._handle()

    def do_GET(self):
        self._handle()

    def do_POST(self):
        path = unquote(urlparse(self.path).path)
        self.st.log.append(("POST", path))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Authorization") != f"Bearer {self.st.token}":
            return self._send(401, {"error": "Invalid credentials"}, {"X-Error-Code": "Unauthorized"})
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/preupload/([^/]+)", path)
        if m:
            files = json.loads(body)["files"]
            return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                               "oid": None} for f in files]}, {"Content-Type": "application/json"})
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/commit/([^/]+)", path)
        if m:
            import base64

            items = [json.loads(line) for line in body.splitlines() if line.strip()]
            if not items or items[0]["key"] != "header":
                return self._send(400, {"error": "the first NDJSON line must be the header"})
            added = {}
            for item in items[1:]:
                if item["key"] != "file" or item["value"].get("encoding") != "base64":
                    return self._send(400, {"error": f"unsupported commit item {item['key']}"})
                added[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            commit = None
            for name, data in added.items():
                commit = self.st.add_file(m[1], name, data)
            self.st.commits.append({"repo": m[1], "summary": items[0]["value"]["summary"], "files": sorted(added)})
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            return self._send(200, {"commitUrl": f"{base}/{m[1]}/commit/{commit}", "commitOid": commit,
                                    "pullRequestUrl": None}, {"Content-Type": "application/json"})
        return self._send(404, {"error": f"no route POST {path}"})

    def _drop(self):
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _handle(self):
        path = unquote(urlparse(self.path).path)
        self.st.log.append((self.command, path))
        fault = self.st.take_fault(self.command, path)
        if fault and fault["action"] in ("500", "503"):
            return self._send(int(fault["action"]), b"Internal Error")
        if fault and fault["action"] == "429":
            return self._send(429, b"Too Many Requests", {"Retry-After": str(fault.get("after", 0))})
        if fault and fault["action"] == "drop":
            return self._drop()
        m = re.fullmatch(r"/pypi/([^/]+)/json", path)
        if m:
            if m[1] not in self.st.pypi:
                return self._send(404, {"message": "Not Found"})
            return self._send(200, {"info": {"name": m[1], "version": self.st.pypi[m[1]][-1]},
                                    "releases": {v: [{"packagetype": "bdist_wheel"}] for v in self.st.pypi[m[1]]}},
                              {"Content-Type": "application/json"})
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path)
        if m:
            repo = self.st.repos.get(m[1])
            if repo is None:
                return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            items = [{"type": "file", "path": n, "size": len(d), "oid": hashlib.sha1(d).hexdigest(),
                      "lfs": {"oid": hashlib.sha256(d).hexdigest(), "size": len(d), "pointerSize": 134}}
                     for n, d in sorted(repo["files"].items())]
            return self._send(200, items, {"Content-Type": "application/json"})
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            repo = self.st.repos.get(m[1])
            if repo is None:
                return self._send(404, b"Repository not found", {"X-Error-Code": "RepoNotFound"})
            if m[2] not in ("main", repo["commit"]):
                return self._send(404, b"Revision not found", {"X-Error-Code": "RevisionNotFound"})
            data = repo["files"].get(m[3])
            if data is None:
                return self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"})
            sha = hashlib.sha256(data).hexdigest()
            if m[3] in self.st.corrupt:
                data = bytes(b ^ 0x5A for b in data[:64]) + data[64:]
            headers = {"X-Repo-Commit": repo["commit"], "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data)),
                       "ETag": f'"{hashlib.sha1(data).hexdigest()}"', "Accept-Ranges": "bytes",
                       "Content-Type": "application/zip"}
            if self.command == "HEAD":
                return self._send(200, data, headers)
            return self._serve(data, headers, fault)
        return self._send(404, {"error": f"no route {path}"})

    def _serve(self, data: bytes, headers: dict, fault: dict | None):
        m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        start = int(m[1]) if m else 0
        if start >= len(data) and m:
            return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
        body = data[start:]
        self.send_response(206 if m else 200)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        if m:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        if fault and fault["action"] == "drop-mid-body":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            return self._drop()
        self.wfile.write(body)
        return None


class FakeHub(LocalServer):
    def __init__(self):
        super().__init__(Handler, HubState())

    def fault(self, method: str, path: str, action: str, count: int = 1, **kw) -> None:
        """The next ``count`` ``method`` requests whose path matches the regex ``path`` get ``action``."""
        self.state.faults.append({"method": method, "path": path, "action": action, "count": count, **kw})
