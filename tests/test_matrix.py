"""The matrix file: the demo validates; every broken variant gives one line, exit code 2, no traceback."""

import re

import pytest

from ci_tools.matrix.schema import SCHEMA_FILE, json_schema
from tests.conftest import run_cli
from tests.support.matrix import SRC, VAD_TAIL

CLS_INPUT = "inputs: {x: [1, 3, 48, 192]}"

BROKEN = {
    "yaml-syntax": (SRC.replace('tag_pattern: "v*"', 'tag_pattern: "v*'), r"YAML syntax error"),
    "empty": ("", r"is empty"),
    "only-comments": ("# nothing here\n", r"is empty"),
    "top-level-list": ("- a\n- b\n", r"must be a mapping"),
    "tab-indent": (SRC.replace("  - name: silero-vad", "\t- name: silero-vad"), r"YAML syntax error"),
    "duplicate-key": (SRC.replace("    license: MIT\n", "    license: MIT\n    license: BSD\n"),
                      r"duplicate key 'license'"),
    "unknown-key": (SRC.replace(VAD_TAIL, VAD_TAIL.replace("precisions:", "precision:")),
                    r"unknown key 'precision'.*did you mean 'precisions'\?"),
    "unknown-top-key": (SRC + "modles: []\n", r"unknown key 'modles'.*did you mean 'models'\?"),
    "wrong-type-list": (SRC.replace("precisions: [fp16]", "precisions: fp16", 1), r"expected a list"),
    "wrong-type-version": (SRC.replace("version: 1\n", 'version: "1"\n', 1), r"version: expected one of 1"),
    "unknown-chip": (SRC.replace("chips: [flagship, QCS9100]", "chips: [SM8751]", 1),
                     r"unknown chip 'SM8751'.*did you mean SM8750\?"),
    "fp16-on-v68": (SRC.replace("chips: [flagship, QCS9100]", "chips: [SM8350]", 1),
                    r"fp16 for SM8350.*v68.*exclude"),
    "fp16-unknown": (SRC.replace("chips: [flagship, QCS9100]", "chips: [SM8845]", 1),
                     r"fp16 for SM8845: no source says whether its HTP \(v81\) has fp16.*fp16_unknown: try"),
    "exclude-a-chip-that-builds-as-another": (SRC.replace(
        "chips: [flagship, QCS9100]\n", "chips: [flagship, QCS9100]\n    exclude: [{soc: QCS9075}]\n", 1),
        r"exclude\[0\]\.soc: write the catalog name for 'QCS9075'.*use QCS9100 \(QCS9075 builds as QCS9100\)"),
    "duplicate-model": (SRC.replace("name: rapidocr", "name: silero-vad"), r"duplicate model name 'silero-vad'"),
    "unpinned-pip": (SRC.replace("package: silero-vad==6.2.3", "package: silero-vad"), r"name==version"),
    "bad-sha256": (SRC.replace("7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87", "abc"),
                   r"sha256 pin"),
    "hf-branch-not-commit": (SRC.replace("      kind: pip\n      package: silero-vad==6.2.3",
                                         "      kind: hf\n      repo: snakers4/silero-vad\n      revision: main", 1),
                             r"revision: expected a pin"),
    "hf-no-revision": (SRC.replace("      kind: pip\n      package: silero-vad==6.2.3",
                                   "      kind: hf\n      repo: snakers4/silero-vad", 1),
                       r"missing required key 'revision'"),
    "dynamic-dim": (SRC.replace(CLS_INPUT, "inputs: {x: [batch, 3, 48, 192]}"), r"x\[0\]: expected a fixed positive"),
    "negative-dim": (SRC.replace(CLS_INPUT, "inputs: {x: [-1, 3, 48, 192]}"), r"positive"),
    "zero-dim": (SRC.replace(CLS_INPUT, "inputs: {x: [1, 0, 48, 192]}"), r"x\[1\]: expected a fixed positive"),
    "float-dim": (SRC.replace(CLS_INPUT, "inputs: {x: [1.5, 3, 48, 192]}"), r"fixed positive integer"),
    "unknown-precision": (SRC.replace("precisions: [fp16]", "precisions: [fp8]", 1),
                          r"expected one of fp16, w8a16, int8, got 'fp8'"),
    "typo-precision": (SRC.replace("precisions: [fp16]", "precisions: [w8a61]", 1), r"did you mean 'w8a16'\?"),
    "unknown-source-kind": (SRC.replace("kind: pip", "kind: pypi", 1), r"'kind' must be one of hf, url, path, pip"),
    "missing-source-kind": (SRC.replace("      kind: pip\n", "", 1), r"'kind' must be one of"),
    "no-models": (SRC[:SRC.index("models:")] + "models: []\n", r"at least 1 item"),
    "recursive-alias": (SRC + "x: &a [*a]\n", r"refers to itself"),
    "bad-dtype": (SRC.replace(CLS_INPUT, "inputs: {x: {shape: [1, 3, 48, 192], dtype: int128}}"),
                  r"dtype: expected one of"),
    "exclude-unknown-chip": (SRC.replace(VAD_TAIL, VAD_TAIL.replace(
        "chips: [flagship, QCS9100]\n", "chips: [flagship, QCS9100]\n    exclude: [{soc: X1}]\n")),
                             r"exclude\[0\]\.soc: unknown chip"),
    "python-tag": (SRC.replace("version: 1\n", "version: !!python/object:os.system 1\n", 1), r"YAML syntax error"),
    "deep-nesting": ("a: " + "[" * 3000 + "]" * 3000 + "\n", r"nested too deeply"),
    "integer-key": (SRC + "1: x\n", r"a key must be a string, got 1"),
    "url-without-sha": (SRC.replace("      kind: pip\n      package: silero-vad==6.2.3\n",
                                    "      kind: url\n      url: https://example.org/vad.onnx\n", 1)
                        .replace("      files:\n        silero_vad/data/silero_vad_openvino_16k.onnx: "
                                 "7776b81ad1b0350c15d7f1555943b9232eb53e9ca5d989c6d0cea9ebc8664d87\n", "", 1)
                        .replace("    license_file: silero_vad-6.2.3.dist-info/licenses/LICENSE\n", "", 1)
                        .replace("        silero_vad-6.2.3.dist-info/licenses/LICENSE: "
                                 "2e63e9a38b6e8fc0c7bc37ce174caca1862870856c6daf5697cfb785e925520b\n", "", 1),
                        r"source.sha256: missing required key 'sha256'"),
    "licence-not-a-source-file": (SRC.replace("license_file: silero_vad-6.2.3.dist-info/licenses/LICENSE",
                                              "license_file: LICENSE.txt"), r"'LICENSE.txt' is not one of the source"),
    "duplicate-graph": (SRC.replace("      - name: rec\n", "      - name: cls\n"), r"duplicate graph name 'cls'"),
    # a graph file the source does not list: a warm cache's old links must not make it resolve
    "graph-not-a-source-file": (SRC.replace("file: silero_vad/data/silero_vad_openvino_16k.onnx",
                                            "file: silero_vad/data/silero_vad.onnx"),
                                r"graphs\[0\]\.file: 'silero_vad/data/silero_vad.onnx' is not one of the source's "
                                r"files.*did you mean 'silero_vad/data/silero_vad_openvino_16k.onnx'"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_matrix_gives_one_line(tmp_path, name):
    text, pattern = BROKEN[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    r = run_cli("plan", "--matrix", str(path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"qnn-release: error: {path}"), lines[0]
    assert re.search(pattern, lines[0]), lines[0]
    assert "(hint:" in lines[0], lines[0]


def test_error_names_the_right_line(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SRC.replace(CLS_INPUT, "inputs: {x: [batch, 3, 48, 192]}"))
    r = run_cli("plan", "--matrix", str(path))
    expected_line = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if "batch, 3" in line)
    assert f"{path}:{expected_line}:" in r.stderr


def test_missing_file_and_unreadable_file(tmp_path):
    r = run_cli("plan", "--matrix", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such matrix file" in r.stderr
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00\x01")
    r = run_cli("plan", "--matrix", str(bad))
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_committed_json_schema_is_current():
    assert SCHEMA_FILE.read_text() == json_schema(), "stale: run `qnn-release schema --write`"
    r = run_cli("schema", "--check")
    assert r.returncode == 0
