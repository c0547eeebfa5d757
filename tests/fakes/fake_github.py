"""A local HTTP server standing in for GitHub's REST API for releases (and release downloads).

It follows the documented contract the client relies on: get a PUBLISHED release by tag (drafts
are never returned), list releases and assets with ``Link`` pagination, create/update/delete
releases, upload to the ``upload_url`` template with Content-Type/Content-Length, 422
``already_exists`` for a duplicate asset name, 422 when a second release of a tag is published,
asset ``digest: "sha256:..."``, at most ``MAX_ASSETS`` (1,000) assets per release (GitHub community discussion
#165616: the 1,001st upload is refused; the answer's shape is GitHub's 422 validation error, its exact text is not
documented) and an upload of 2 GiB or more refused from its Content-Length (GitHub docs, "About releases": each
file under 2 GiB), rename/delete assets, ``browser_download_url`` for published
releases with ``Range``, the asset API URL with ``Accept: application/octet-stream`` answering a
redirect, and 401 for writes without the token. Faults can be injected per request: 500/502, 429
and secondary-rate-limit 403 with ``retry-after`` (REFERENCE.md 7), a connection closed before any
answer (``drop``), after storing an upload (``drop-after-store``) or after half a download's body
(``drop-mid-body``), a corrupted download (``corrupt``), and an asset that a listing no longer shows
after it was stored (``lose``) or whose stored bytes changed (``alter``); ``skip`` lets the first
matching requests through. ``502-starter`` is the failure GitHub documents for uploads (REST API, "Upload a release
asset": "When an upstream failure occurs, you will receive a 502 Bad Gateway status. This may leave an empty asset
with a state of starter. It can be safely deleted"): the upload answers 502 and leaves an empty asset of that name
with ``state: "starter"`` and no digest, which the listing shows, a second upload of the name meets as
``already_exists``, and a download answers 404 (it has no content); a deletion removes it. Every other asset has
``state: "uploaded"`` (REST API, "Get a release asset").
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from tests.fakes.local_server import LocalServer

MAX_ASSETS = 1000
MAX_ASSET_BYTES = 2 * 1024**3


class State:
    def __init__(self, token: str, page_size: int):
        self.token, self.page_size = token, page_size
        self.lock = threading.RLock()
        self.releases: dict[int, dict] = {}
        self.assets: dict[int, dict] = {}  # id -> {release, name, label, data, content_type}
        self.next_id = 100
        self.faults: list[dict] = []
        self.log: list[tuple[str, str, dict]] = []
        self.create_delay = 0.0
        # git data: ref name -> commit sha; sha -> object
        self.refs: dict[str, str] = {"heads/main": "c0" * 20}
        self.objects: dict[str, dict] = {"c0" * 20: {"type": "commit", "tree": "t0" * 20, "parents": []}}
        self.pulls: list[dict] = []
        self.tags: dict[str, str] = {}  # "OWNER/NAME:tag" -> the commit it names

    def new_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id


class Handler(BaseHTTPRequestHandler):
    server_version = "FakeGitHub/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output clean
        pass

    # -- helpers ---------------------------------------------------------------------------------

    @property
    def st(self) -> State:
        return self.server.state  # type: ignore[attr-defined]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _send(self, code: int, body=None, headers: dict | None = None) -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if body is not None and not isinstance(body, bytes):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _read_body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _fault(self, path: str) -> dict | None:
        with self.st.lock:
            for f in self.st.faults:
                if f.get("count", 1) > 0 and f["method"] == self.command and re.search(f["path"], path):
                    if f.get("skip", 0) > 0:  # let the first `skip` matching requests through
                        f["skip"] -= 1
                        continue
                    f["count"] = f.get("count", 1) - 1
                    return f
        return None

    def _authorised(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {self.st.token}"

    def _asset_json(self, aid: int) -> dict:
        a = self.st.assets[aid]
        rel = self.st.releases[a["release"]]
        starter = a.get("state") == "starter"
        return {"id": aid, "name": a["name"], "label": a["label"], "size": len(a["data"]),
                "content_type": a["content_type"], "state": a.get("state", "uploaded"),
                "digest": None if starter else "sha256:" + hashlib.sha256(a["data"]).hexdigest(),
                "url": f"{self.base}/repos/{rel['repo']}/releases/assets/{aid}",
                "browser_download_url": f"{self.base}/{rel['repo']}/releases/download/{rel['tag_name']}/{a['name']}"}

    def _release_json(self, rid: int) -> dict:
        r = self.st.releases[rid]
        return {"id": rid, "tag_name": r["tag_name"], "name": r["name"], "body": r["body"], "draft": r["draft"],
                "prerelease": r.get("prerelease", False),
                "url": f"{self.base}/repos/{r['repo']}/releases/{rid}",
                "assets_url": f"{self.base}/repos/{r['repo']}/releases/{rid}/assets",
                "upload_url": f"{self.base}/uploads/repos/{r['repo']}/releases/{rid}/assets{{?name,label}}",
                "assets": [self._asset_json(a) for a in sorted(self.st.assets)
                           if self.st.assets[a]["release"] == rid]}

    def _paginate(self, items: list, query: dict) -> None:
        per_page = min(int(query.get("per_page", ["30"])[0]), self.st.page_size)
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            path = urlparse(self.path).path
            headers["Link"] = f'<{self.base}{path}?per_page={per_page}&page={page + 1}>; rel="next"'
        self._send(200, chunk, headers)

    # -- dispatch --------------------------------------------------------------------------------

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def do_PATCH(self):
        self._handle()

    def do_DELETE(self):
        self._handle()

    def _handle(self):
        url = urlparse(self.path)
        path, query = url.path, parse_qs(url.query)
        self.st.log.append((self.command, self.path, dict(self.headers)))
        fault = self._fault(self.path)
        if fault and fault["action"] in ("500", "502"):
            self._read_body()
            return self._send(int(fault["action"]), {"message": "Server Error"})
        if fault and fault["action"] == "429":
            self._read_body()
            return self._send(429, {"message": "rate limited"}, {"retry-after": str(fault.get("after", 1))})
        if fault and fault["action"] == "403-secondary":
            self._read_body()
            return self._send(403, {"message": "You have exceeded a secondary rate limit."}, {"retry-after": "1"})
        if fault and fault["action"] == "drop":  # the connection closes before any answer
            self._read_body()
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        write = self.command in ("POST", "PATCH", "DELETE")
        if write and not self._authorised():
            self._read_body()
            return self._send(401, {"message": "Bad credentials"})
        st = self.st
        with st.lock:
            handled = self._git(path)
            if handled:
                return None
            m = re.fullmatch(r"/repos/([^/]+/[^/]+)/releases/tags/([^/]+)", path)
            if m and self.command == "GET":
                for rid, r in sorted(st.releases.items()):
                    if r["repo"] == m[1] and r["tag_name"] == m[2] and not r["draft"]:
                        return self._send(200, self._release_json(rid))
                return self._send(404, {"message": "Not Found"})
            m = re.fullmatch(r"/repos/([^/]+/[^/]+)/actions/workflows/([^/]+)/runs", path)
            if m and self.command == "GET":  # REST API "List workflow runs for a workflow" (status, branch filters)
                runs = [r for r in getattr(st, "runs", []) if r.get("workflow") == m[2]
                        and r.get("status") == query.get("status", [r.get("status")])[0]
                        and r.get("head_branch") == query.get("branch", [r.get("head_branch")])[0]]
                return self._send(200, {"total_count": len(runs), "workflow_runs": runs[::-1][:1]})
            m = re.fullmatch(r"/repos/([^/]+/[^/]+)/releases/latest", path)
            if m and self.command == "GET":  # REST API "Get the latest release": published, not a pre-release,
                # the one last marked latest (make_latest "true", the default), else the newest
                mine = [(rid, r) for rid, r in sorted(st.releases.items()) if r["repo"] == m[1] and not r["draft"]
                        and not r.get("prerelease") and r.get("make_latest", "true") != "false"]
                return self._send(200, self._release_json(mine[-1][0])) if mine else \
                    self._send(404, {"message": "Not Found"})
            m = re.fullmatch(r"/repos/([^/]+/[^/]+)/releases", path)
            if m and self.command == "GET":
                # "Only users with push access will receive listings for draft releases" (REST API, List releases)
                items = [self._release_json(rid) for rid in sorted(st.releases, reverse=True)
                         if st.releases[rid]["repo"] == m[1] and (self._authorised() or not st.releases[rid]["draft"])]
                return self._paginate(items, query)
            if m and self.command == "POST":
                body = json.loads(self._read_body() or b"{}")
                time.sleep(st.create_delay)
                if not body.get("draft") and any(r["tag_name"] == body["tag_name"] and not r["draft"]
                                                 for r in st.releases.values()):
                    return self._send(422, {"message": "Validation Failed",
                                            "errors": [{"resource": "Release", "code": "already_exists"}]})
                rid = st.new_id()
                st.releases[rid] = {"repo": m[1], "tag_name": body["tag_name"], "name": body.get("name"),
                                    "body": body.get("body", ""), "draft": bool(body.get("draft"))}
                return self._send(201, self._release_json(rid))
            m = re.fullmatch(r"/repos/([^/]+/[^/]+)/releases/(\d+)", path)
            if m:
                rid = int(m[2])
                if rid not in st.releases:
                    self._read_body()
                    return self._send(404, {"message": "Not Found"})
                if self.command == "PATCH":
                    body = json.loads(self._read_body() or b"{}")
                    r = st.releases[rid]
                    if body.get("draft") is False and r["draft"] and any(
                            o["tag_name"] == r["tag_name"] and not o["draft"] for o in st.releases.values()):
                        return self._send(422, {"message": "Validation Failed",
                                                "errors": [{"resource": "Release", "code": "already_exists"}]})
                    # GitHub: make_latest is the string "true", "false" or "legacy"; a pre-release is never latest
                    if "make_latest" in body and body["make_latest"] not in ("true", "false", "legacy"):
                        return self._send(422, {"message": "Validation Failed",
                                                "errors": [{"field": "make_latest", "code": "invalid"}]})
                    r.update({k: v for k, v in body.items()
                              if k in ("draft", "body", "name", "prerelease", "make_latest")})
                    return self._send(200, self._release_json(rid))
                if self.command == "DELETE":
                    del st.releases[rid]
                    for aid in [a for a, v in st.assets.items() if v["release"] == rid]:
                        del st.assets[aid]
                    return self._send(204)
                return self._send(200, self._release_json(rid))
            m = re.fullmatch(r"/repos/([^/]+/[^/]+)/releases/(\d+)/assets", path)
            if m and self.command == "GET":
                rid = int(m[2])
                if rid not in st.releases:
                    return self._send(404, {"message": "Not Found"})
                if fault and fault["action"] == "alter":  # an asset whose stored bytes are not what was sent
                    for a in st.assets.values():
                        if a["release"] == rid and a["name"] == fault["name"]:
                            a["data"] = a["data"] + b"\0"
                if fault and fault["action"] == "lose":  # an asset GitHub stored, then lost (or a replica lags)
                    for aid in [a for a, v in st.assets.items() if v["release"] == rid and v["name"] == fault["name"]]:
                        del st.assets[aid]
                return self._paginate([self._asset_json(a) for a in sorted(st.assets)
                                       if st.assets[a]["release"] == rid], query)
            m = re.fullmatch(r"/uploads/repos/([^/]+/[^/]+)/releases/(\d+)/assets", path)
            if m and self.command == "POST":
                rid, name = int(m[2]), query.get("name", [""])[0]
                if "Content-Length" not in self.headers or "Content-Type" not in self.headers:
                    self._read_body()
                    return self._send(400, {"message": "Content-Length and Content-Type are required"})
                if int(self.headers["Content-Length"]) >= MAX_ASSET_BYTES:
                    self.close_connection = True  # the body is not read
                    return self._send(422, {"message": "Validation Failed", "errors": [
                        {"resource": "ReleaseAsset", "code": "custom", "field": "size",
                         "message": "size must be less than 2 GiB"}]})
                data = self._read_body()
                if rid not in st.releases:
                    return self._send(404, {"message": "Not Found"})
                if sum(a["release"] == rid for a in st.assets.values()) >= MAX_ASSETS:
                    return self._send(422, {"message": "Validation Failed", "errors": [
                        {"resource": "ReleaseAsset", "code": "custom",
                         "message": f"a release holds at most {MAX_ASSETS} assets"}]})
                if any(a["release"] == rid and a["name"] == name for a in st.assets.values()):
                    return self._send(422, {"message": "Validation Failed", "errors": [
                        {"resource": "ReleaseAsset", "code": "already_exists", "field": "name"}]})
                aid = st.new_id()
                st.assets[aid] = {"release": rid, "name": name, "label": query.get("label", [None])[0],
                                  "data": data, "content_type": self.headers["Content-Type"]}
                if fault and fault["action"] == "502-starter":
                    st.assets[aid].update(data=b"", state="starter")
                    return self._send(502, {"message": "Bad Gateway"})
                if fault and fault["action"] == "drop-after-store":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                return self._send(201, self._asset_json(aid))
            m = re.fullmatch(r"/repos/([^/]+/[^/]+)/releases/assets/(\d+)", path)
            if m:
                aid = int(m[2])
                if aid not in st.assets:
                    self._read_body()
                    return self._send(404, {"message": "Not Found"})
                if self.command == "PATCH":
                    body = json.loads(self._read_body() or b"{}")
                    a = st.assets[aid]
                    if "name" in body and any(o["release"] == a["release"] and o["name"] == body["name"]
                                              and oid != aid for oid, o in st.assets.items()):
                        return self._send(422, {"message": "Validation Failed",
                                                "errors": [{"code": "already_exists"}]})
                    a.update({k: v for k, v in body.items() if k in ("name", "label")})
                    return self._send(200, self._asset_json(aid))
                if self.command == "DELETE":
                    del st.assets[aid]
                    return self._send(204)
                if self.headers.get("Accept") == "application/octet-stream":
                    return self._send(302, b"", {"Location": f"{self.base}/_storage/{aid}"})
                return self._send(200, self._asset_json(aid))
            m = re.fullmatch(r"/_storage/(\d+)", path)
            if m and int(m[1]) in st.assets and st.assets[int(m[1])].get("state") != "starter":
                return self._serve_bytes(st.assets[int(m[1])]["data"], fault)
            m = re.fullmatch(r"/([^/]+/[^/]+)/releases/download/([^/]+)/([^/]+)", path)
            if m and self.command == "GET":
                for a in st.assets.values():
                    rel = st.releases[a["release"]]
                    if rel["repo"] == m[1] and rel["tag_name"] == m[2] and a["name"] == m[3] and not rel["draft"] \
                            and a.get("state") != "starter":
                        return self._serve_bytes(a["data"], fault)
                return self._send(404, b"Not Found")
        return self._send(404, {"message": f"no route {self.command} {path}"})

    def _git(self, path: str) -> bool:
        """The Git data API (refs, commits, trees) and pull requests, enough for a bot's PR."""
        st = self.st
        m = re.fullmatch(r"/repos/[^/]+/[^/]+/git/ref/(heads/.+)", path)
        if m and self.command == "GET":
            if m[1] not in st.refs:
                self._send(404, {"message": "Not Found"})
            else:
                self._send(200, {"ref": f"refs/{m[1]}", "object": {"sha": st.refs[m[1]], "type": "commit"}})
            return True
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/commits/([^/]+)", path)
        if m and self.command == "GET":  # REST API "Get a commit": a sha, branch or tag name (an annotated tag
            # resolves to its commit); an unknown ref is 422 "No commit found for SHA: ..."
            sha = st.tags.get(f"{m[1]}:{m[2]}") or st.refs.get(f"heads/{m[2]}")
            self._send(200, {"sha": sha}) if sha else \
                self._send(422, {"message": f"No commit found for SHA: {m[2]}"})
            return True
        m = re.fullmatch(r"/repos/[^/]+/[^/]+/git/commits/([0-9a-f]+)", path)
        if m and self.command == "GET":
            obj = st.objects.get(m[1])
            self._send(200, {"sha": m[1], "tree": {"sha": obj["tree"]}}) if obj else self._send(404, {})
            return True
        reads_body = (self.command in ("POST", "PATCH") and "/git/" in path) or (
            path.endswith("/pulls") and self.command == "POST")
        body = json.loads(self._read_body() or b"{}") if reads_body else None
        if re.fullmatch(r"/repos/[^/]+/[^/]+/git/trees", path) and self.command == "POST":
            sha = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
            st.objects[sha] = {"type": "tree", **body}
            self._send(201, {"sha": sha})
            return True
        if re.fullmatch(r"/repos/[^/]+/[^/]+/git/commits", path) and self.command == "POST":
            if body["tree"] not in st.objects or any(p not in st.objects for p in body["parents"]):
                self._send(422, {"message": "tree or parent not found"})
                return True
            sha = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()
            st.objects[sha] = {"type": "commit", **body}
            self._send(201, {"sha": sha})
            return True
        if re.fullmatch(r"/repos/[^/]+/[^/]+/git/refs", path) and self.command == "POST":
            name = body["ref"].removeprefix("refs/")
            if name in st.refs:
                self._send(422, {"message": "Reference already exists"})
            else:
                st.refs[name] = body["sha"]
                self._send(201, {"ref": body["ref"], "object": {"sha": body["sha"]}})
            return True
        m = re.fullmatch(r"/repos/[^/]+/[^/]+/git/refs/(heads/.+)", path)
        if m and self.command == "PATCH":
            st.refs[m[1]] = body["sha"]
            self._send(200, {"ref": f"refs/{m[1]}", "object": {"sha": body["sha"]}})
            return True
        if path.endswith("/pulls") and self.command == "POST":
            if any(p["head"] == body["head"] for p in st.pulls):
                self._send(422, {"message": "A pull request already exists"})
            else:
                pr = {**body, "number": len(st.pulls) + 1}
                st.pulls.append(pr)
                self._send(201, {**pr, "html_url": f"{self.base}/pull/{pr['number']}"})
            return True
        return False

    def _serve_bytes(self, data: bytes, fault: dict | None) -> None:
        start = 0
        rng = self.headers.get("Range")
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-", rng)
            start = int(m[1]) if m else 0
            if start >= len(data):
                return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
        body = data[start:]
        if fault and fault["action"] == "corrupt":
            body = bytes(b ^ 0xFF for b in body[:16]) + body[16:]
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if fault and fault["action"] == "drop-mid-body":
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        self.wfile.write(body)
        return None


class FakeGitHub(LocalServer):
    def __init__(self, token: str = "ghp_test_token_0123456789", page_size: int = 2):
        super().__init__(Handler, State(token, page_size))

    def fault(self, method: str, path: str, action: str, count: int = 1, **kw) -> None:
        self.state.faults.append({"method": method, "path": path, "action": action, "count": count, **kw})

    def releases(self, repo: str, tag: str) -> list[dict]:
        return [{"id": rid, **r} for rid, r in sorted(self.state.releases.items())
                if r["repo"] == repo and r["tag_name"] == tag]

    def add_release(self, repo: str, tag: str, commit: str, **fields) -> int:
        """A published release of ``tag`` naming ``commit`` (``draft``, ``prerelease`` as given)."""
        with self.state.lock:
            rid = self.state.new_id()
            self.state.releases[rid] = {"repo": repo, "tag_name": tag, "name": tag, "body": "", "draft": False,
                                        **fields}
            self.state.tags[f"{repo}:{tag}"] = commit
        return rid

    def asset_names(self, release_id: int) -> list[str]:
        return sorted(a["name"] for a in self.state.assets.values() if a["release"] == release_id)
