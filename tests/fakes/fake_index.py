"""A local package index as pip reads one, serving wheels made in the test.

Rule by rule, with the evidence:
- ``GET /simple/<normalized name>/`` answers an HTML page with one ``<a>`` per file (PEP 503, "Simple Repository
  API": the name normalized with ``re.sub(r"[-_.]+", "-", name).lower()``, the URL's fragment
  ``#sha256=<hex>`` the file's hash, which pip checks).
- A file's ``Requires-Python`` is given in the anchor's ``data-requires-python`` attribute, HTML-escaped (PEP 503,
  as amended by PEP 345's field; pip skips a file whose range excludes the running Python unless
  ``--ignore-requires-python`` is given: pip's documentation of that option).
- ``GET /files/<wheel>`` answers the wheel's bytes; a name it does not hold is 404 (the index then has no
  distribution, and pip says "No matching distribution").
"""

from __future__ import annotations

import hashlib
import html
import io
import re
import zipfile
from http.server import BaseHTTPRequestHandler

from tests.fakes.local_server import LocalServer


def wheel(name: str, version: str, files: dict[str, bytes], requires_python: str | None = None) -> tuple[str, bytes]:
    """A pure-Python wheel (py3-none-any) holding ``files``, with its dist-info (METADATA, WHEEL, RECORD)."""
    dist = f"{re.sub(r'[-.]+', '_', name)}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires_python:
        meta += f"Requires-Python: {requires_python}\n"
    members = {**files, f"{dist}.dist-info/METADATA": meta.encode(),
               f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                          b"Tag: py3-none-any\n"}
    record = "".join(f"{n},,\n" for n in members) + f"{dist}.dist-info/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, data in {**members, f"{dist}.dist-info/RECORD": record.encode()}.items():
            zf.writestr(n, data)
    return f"{dist}-py3-none-any.whl", buf.getvalue()


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        state: dict = self.server.state  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        m = re.fullmatch(r"/simple/([^/]+)/?", path)
        if m:
            links = [f'<a href="/files/{f}#sha256={hashlib.sha256(data).hexdigest()}"'
                     + (f' data-requires-python="{html.escape(rp)}"' if rp else "") + f">{f}</a>"
                     for f, (data, rp, project) in state.items() if project == m[1]]
            return self._answer(200 if links else 404, "<html><body>" + "\n".join(links) + "</body></html>",
                                "text/html")
        m = re.fullmatch(r"/files/([^/]+)", path)
        if m and m[1] in state:
            return self._answer(200, state[m[1]][0], "application/octet-stream")
        self._answer(404, "not found", "text/plain")

    def _answer(self, code: int, body: str | bytes, kind: str) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeIndex(LocalServer):
    """``add`` a wheel; ``url + "/simple"`` is what PIP_INDEX_URL takes."""

    def __init__(self) -> None:
        super().__init__(_Handler, {})

    def add(self, name: str, version: str, files: dict[str, bytes], requires_python: str | None = None) -> str:
        fname, data = wheel(name, version, files, requires_python)
        self.state[fname] = (data, requires_python, re.sub(r"[-_.]+", "-", name).lower())
        return fname
