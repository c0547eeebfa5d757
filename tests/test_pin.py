"""#46 item 4: `qnn-release pin` fills in every missing or changed sha256 of a matrix's sources and samples in one
go, keeping comments and layout, and says what it changed; `--check` fails while one is missing."""

from __future__ import annotations

import hashlib

from tests.conftest import run_cli

MATRIX = """# our models: comments and layout are ours
version: 1
sdk:
  qairt:
    - {version: 2.40.0.251030, hf_repo: csukuangfj/qnn-toolkit, file: v2.40.0.251030.zip, revision: null, sha256: null}
  onnxruntime_qnn: 2.7.0
models:
  - name: m
    description: test
    license: MIT
    source:
      kind: path
      path: models/m.onnx
      sha256: "%s"   # the model, retrained last week
    graphs:
      - {name: g, file: m.onnx}
    samples:
      description: two recordings
      license: CC0
      source:
        kind: parts
        sources:
          - kind: path
            path: data/a.npz
            sha256: '0000000000000000000000000000000000000000000000000000000000000000'
          - kind: path
            path: data/b.npz
            sha256: "%s"
      front_end: {kind: npz}
    chips: [SM8750]
"""


def test_pin_fills_every_missing_or_stale_pin_in_one_go_keeping_comments(tmp_path):
    repo = tmp_path / "r"
    for name, data in (("models/m.onnx", b"new model"), ("data/a.npz", b"a"), ("data/b.npz", b"b")):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    digest = {n: hashlib.sha256((repo / n).read_bytes()).hexdigest() for n in ("models/m.onnx", "data/a.npz",
                                                                                "data/b.npz")}
    (repo / "matrix").mkdir()
    matrix = repo / "matrix" / "models.yaml"
    before = MATRIX % (hashlib.sha256(b"old model").hexdigest(), digest["data/b.npz"])
    matrix.write_text(before)
    env_cache = ["--cache", str(tmp_path / "cache")]
    r = run_cli("pin", "--matrix", str(matrix), "--check", *env_cache)
    assert r.returncode == 1 and "2 of 3 pin(s) missing or stale" in r.stdout, r.stdout + r.stderr
    r = run_cli("pin", "--matrix", str(matrix), *env_cache)
    assert r.returncode == 0, r.stderr
    assert "models[0].source.sha256" in r.stdout and "models[0].samples.source.sources[0].sha256" in r.stdout
    assert "pinned 2 of 3 file(s)" in r.stdout
    after = matrix.read_text()
    assert f'sha256: {digest["models/m.onnx"]}   # the model, retrained last week' in after
    assert f"sha256: {digest['data/a.npz']}" in after
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(changed) == 2 and len(after.splitlines()) == len(before.splitlines())  # nothing else moved
    assert run_cli("pin", "--matrix", str(matrix), "--check", *env_cache).returncode == 0


def test_a_build_says_every_unpinned_or_changed_sample_at_once(tmp_path):
    """#46 item 4, without `pin`: a new set of samples is one failed fetch naming every file, a placeholder sha256
    as "not pinned yet" (not "changed upstream"), a changed one as a mismatch; one file alone says just that."""
    import pytest

    from ci_tools.errors import SourceError
    from ci_tools.matrix.schema import load_matrix
    from ci_tools.sources.store import SourceStore

    repo = tmp_path / "r"
    for name, data in (("models/m.onnx", b"model"), ("data/a.npz", b"a"), ("data/b.npz", b"b")):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(data)
    (repo / "matrix").mkdir()
    matrix = repo / "matrix" / "models.yaml"
    matrix.write_text(MATRIX % (hashlib.sha256(b"model").hexdigest(), hashlib.sha256(b"old b").hexdigest()))
    model = load_matrix(matrix).matrix.model("m")
    store = SourceStore(tmp_path / "cache", repo)
    with pytest.raises(SourceError) as e:
        store.fetch_source(model, model.samples.source)
    text = e.value.message
    assert text.startswith("m: 2 file(s) not pinned yet or changed: ") and "qnn-release pin" in (e.value.hint or "")
    assert "data/a.npz: not pinned yet" in text and "data/b.npz: sha256" in text and "does not match the pin" in text
    (repo / "data" / "b.npz").write_bytes(b"old b")  # now only the placeholder is left: said alone
    with pytest.raises(SourceError) as e:
        store.fetch_source(model, model.samples.source)
    assert "data/a.npz: not pinned yet" in e.value.message and "file(s)" not in e.value.message
