"""#43 item 3: one matrix with includes: the voice's and Whisper's files release with models.yaml from the same
workflows, each in its own file; what cannot be released together is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ci_tools.errors import ConfigError
from ci_tools.matrix.schema import load_matrix
from ci_tools.workflows.render import render_all
from tests.conftest import SDK_SECTION


def _model(repo: Path, name: str) -> dict:
    (repo / "models").mkdir(exist_ok=True)
    (repo / "models" / f"{name}.onnx").write_bytes(b"graph")
    return {"name": name, "description": "d", "license": "MIT",
            "source": {"kind": "path", "path": f"models/{name}.onnx", "sha256": "0" * 64},
            "graphs": [{"name": "g", "file": f"{name}.onnx"}], "chips": ["SM8750"],
            "generated_inputs_ok": "a test graph"}


def _write(repo: Path, file: str, models: list[dict], **extra) -> Path:
    path = repo / "matrix" / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "sdk": SDK_SECTION, **extra, "models": models}, sort_keys=False))
    return path


def test_included_models_release_with_the_main_matrix(tmp_path):
    _write(tmp_path, "tts.yaml", [_model(tmp_path, "voice")])
    _write(tmp_path, "whisper.yaml", [_model(tmp_path, "asr-enc"), _model(tmp_path, "asr-dec")])
    main = _write(tmp_path, "models.yaml", [_model(tmp_path, "vad")], include=["tts.yaml", "whisper.yaml"])
    loaded = load_matrix(main)
    assert [m.name for m in loaded.matrix.models] == ["vad", "voice", "asr-enc", "asr-dec"]
    # an SDK bump changes models.yaml only: an included file's own (older) sdk block does not stop the release
    tts = tmp_path / "matrix" / "tts.yaml"
    tts.write_text(tts.read_text().replace("onnxruntime_qnn: 2.7.0", "onnxruntime_qnn: 2.6.0"))
    assert load_matrix(main).matrix.sdk.onnxruntime_qnn == "2.7.0" and len(load_matrix(main).matrix.models) == 4
    release = yaml.safe_load(render_all(loaded)[Path(".github/workflows/release.yaml")])
    assert sorted(release["jobs"]["export"]["strategy"]["matrix"]["model"]) == ["asr-dec", "asr-enc", "vad", "voice"]


@pytest.mark.parametrize(("case", "text"), [
    ("a name twice", "model 'vad' is in models.yaml too"),
    ("no such file", "is not another matrix file beside it"),
    ("nested", "includes others in turn"),
])
def test_what_cannot_release_together_is_refused_in_one_line(tmp_path, case, text):
    other = [_model(tmp_path, "vad" if case == "a name twice" else "voice")]
    _write(tmp_path, "deeper.yaml", [_model(tmp_path, "deep")])
    _write(tmp_path, "tts.yaml", other, **({"include": ["deeper.yaml"]} if case == "nested" else {}))
    main = _write(tmp_path, "models.yaml", [_model(tmp_path, "vad")],
                  include=["missing.yaml" if case == "no such file" else "tts.yaml"])
    with pytest.raises(ConfigError) as e:
        load_matrix(main)
    assert text in e.value.message and "include[0]" in e.value.message and "\n" not in e.value.message
