"""New models, first try: the HTP doctor, inspect, data-sized outputs, parity like with like, graph fixes,
per-output verification with precision-fitting hints, and where verification inputs came from."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import path_model, run_cli, write_matrix
from tests.support import models


def _env(cache):
    return {**os.environ, "QNN_RELEASE_CACHE": str(cache)}


def _report(out):
    return json.loads((out / "build-report.json").read_text())


def dynamic_quant(path):
    """DynamicQuantizeLinear + MatMulInteger: what onnxruntime's dynamic quantizer writes."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["mi"], name="mmi"),
             helper.make_node("Cast", ["mi"], ["mf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Mul", ["mf", "xs"], ["y"], name="rescale")]
    g = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(rng.integers(0, 255, (8, 4)).astype(np.uint8), "w"),
                           numpy_helper.from_array(np.array(128, np.uint8), "wz")])
    return models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def runtime_clip(path):
    """Clip whose min is computed at run time and whose max is +inf (HTP needs finite constants)."""
    nodes = [helper.make_node("ReduceMin", ["x"], ["m"], keepdims=0, name="floor"),
             helper.make_node("Clip", ["x", "m", "inf"], ["c"], name="clip_rt"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "clip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(np.array(np.inf, np.float32), "inf")])
    return models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def data_sized(path):
    """An output whose length is the number of positive inputs (NonZero)."""
    nodes = [helper.make_node("Greater", ["x", "zero"], ["b"], name="positive"),
             helper.make_node("NonZero", ["b"], ["nz"], name="where"),
             helper.make_node("Cast", ["nz"], ["y"], to=TensorProto.FLOAT, name="cast")]
    g = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "n"])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_one_graph_failing_in_prepare_stops_nothing_else(repo, tmp_path):
    good = models.mlp(repo / "models" / "good.onnx", dynamic_batch=False)
    bad = data_sized(repo / "models" / "nz.onnx")
    matrix = write_matrix(repo, [path_model(repo, "good", good, chips=["SM8750"]),
                                 path_model(repo, "nz", bad, chips=["SM8750", "SM8550"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 8 and "Traceback" not in r.stderr and "internal error" not in r.stdout + r.stderr
    rep = {t["id"]: t for t in _report(out)["targets"]}
    assert rep["good.main.sm8750.fp16"]["status"] == "ok"
    for soc in ("sm8750", "sm8550"):
        t = rep[f"nz.main.{soc}.fp16"]
        assert t["status"] == "failed" and t["exit_code"] == 5
        assert "output 'y''s length depends on the input data" in t["error"]
        assert "fix its length in the export (pad or split the graph)" in t["error"] and "NonZero" in t["error"]


def test_a_dynamically_quantized_graph_is_named_as_such_without_verbose(repo, tmp_path):
    f = dynamic_quant(repo / "models" / "dq.onnx")
    matrix = write_matrix(repo, [path_model(repo, "dq", f, chips=["SM8750", "SM8650"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 8
    t = _report(out)["targets"][0]
    assert "DynamicQuantizeLinear x1 (dql)" in t["error"] and "MatMulInteger x1 (mmi)" in t["error"]
    assert "start from the float model" in t["error"] and "fixes: [dequantize]" in t["error"]
    assert t["diagnosis"]["ops"] == {"DynamicQuantizeLinear": 1, "MatMulInteger": 1}
    # quiet by default: the QNN library's banner and the EP's log lines are not on the terminal
    assert "LIBNATIVE" not in r.stdout + r.stderr and "[E:onnxruntime" not in r.stdout + r.stderr


def test_a_runtime_clip_is_explained_and_the_declared_fix_builds_it(repo, tmp_path):
    f = runtime_clip(repo / "models" / "clip.onnx")
    matrix = write_matrix(repo, [path_model(repo, "clip", f, chips=["SM8750"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 8
    err = _report(out)["targets"][0]["error"]
    assert "Clip x1 (clip_rt)" in err and "min is computed at run time" in err and "max is infinite" in err
    assert "clip-to-max-min" in err
    fixed = path_model(repo, "clip", f, chips=["SM8750"],
                       graphs=[{"name": "main", "file": "clip.onnx", "fixes": ["clip-to-max-min"]}])
    matrix = write_matrix(repo, [fixed])
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = _report(out)
    assert any("clip-to-max-min: 1 Clip" in n for n in rep["prepared"][0]["notes"])
    t = rep["targets"][0]
    assert t["status"] == "ok" and t["placement"]["cpu_nodes"] == 0 and "Clip" not in t["placement"]["ops"]


def test_inspect_suggests_an_entry_plan_accepts_and_names_what_htp_rejects(repo, tmp_path):
    emb = models.embedding(repo / "models" / "Token Embed.onnx")  # int64 ids [1, seq]
    r = run_cli("inspect", str(emb), "--soc", "SM8750", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    entry = rep["suggested_graph"]
    assert entry["inputs"]["ids"] == {"shape": [1, 16], "dtype": "int32"}
    assert rep["htp"][0]["ok"] is True and rep["ops"] == {"Gather": 1, "ReduceMean": 1}
    matrix = write_matrix(repo, [path_model(repo, "emb", emb, graphs=[entry], chips=["SM8750"])])
    r = run_cli("plan", "--matrix", str(matrix))
    assert r.returncode == 0 and "emb.token-embed.sm8750.fp16" in r.stdout, r.stderr
    bad = dynamic_quant(repo / "models" / "dq.onnx")
    r = run_cli("inspect", str(bad), "--soc", "SM8750", "--soc", "SM8350")
    assert r.returncode == 0, r.stderr
    assert "HTP rejects 2 node(s)" in r.stdout and "MatMulInteger x1 (mmi)" in r.stdout
    assert "fix: start from the float model" in r.stdout and "SM8350 (v68, no fp16)" in r.stdout
    snippet = r.stdout.split("suggested graphs[] entry")[1].split("\n", 1)[1].split("\nSM")[0]
    assert yaml.safe_load(snippet)[0]["file"] == "dq.onnx"
    r = run_cli("inspect", str(repo / "nope.onnx"))
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr


def test_repeated_filters_add_up_in_plan_and_build(repo, tmp_path):
    f = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(repo, [path_model(repo, "m", f, chips=["flagship", "QCS9100"])])
    r = run_cli("plan", "--matrix", str(matrix), "--soc", "SM8550", "--soc", "SM8750", "--soc", "QCS9100", "--json")
    assert r.returncode == 0 and {t["soc"] for t in json.loads(r.stdout)["targets"]} == {"SM8550", "SM8750",
                                                                                         "QCS9100"}
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), "--soc", "SM8550", "--soc", "SM8750",
                env=_env(tmp_path / "c"))
    assert r.returncode == 0 and {t["soc"] for t in _report(out)["targets"]} == {"SM8550", "SM8750"}
    rep = _report(out)["targets"][0]
    # where the verification inputs came from, and what the binary costs per weight
    assert rep["verify_inputs"].startswith("generated: uniform [-1, 1)")
    assert rep["parameters"] == 32 * 64 + 64 + 64 * 8 and rep["bytes_per_parameter"] > 0
    assert "verified on generated inputs only: m" in r.stdout


# -- verification, unit by unit --------------------------------------------------------------------------


def outer_scope_if(path):
    """An If whose branches read a value from the outer graph and whose condition comes from the data:
    ONNX Runtime cannot even partition it for the EP (INVALID_GRAPH "... of node: []")."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 8])])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "two"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 8])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="If_32")]
    g = helper.make_graph(nodes, "iff", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                           numpy_helper.from_array(np.array(2, np.float32), "two")])
    return models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_a_data_dependent_if_is_named_once_by_build_and_by_inspect(repo, tmp_path):
    f = outer_scope_if(repo / "models" / "iff.onnx")
    matrix = write_matrix(repo, [path_model(repo, "iff", f, chips=["SM8750", "SM8650"], precisions=["w8a16"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 8, r.stdout + r.stderr
    for t in _report(out)["targets"]:  # w8a16 only: the trial still runs (in fp16, on an fp16-capable chip)
        assert "If x1 (If_32)" in t["error"] and "control flow decided by the data" in t["error"]
        assert "no chip was compiled" in t["error"]
    r = run_cli("inspect", str(f), "--soc", "SM8750")
    assert r.returncode == 0 and "If x1 (If_32)" in r.stdout and "graphs[].constants" in r.stdout, r.stdout
    assert "If If_32: its condition comes from x; fix: decided by the data" in r.stdout


def test_inspect_names_the_input_that_decides_an_if(repo):
    """silero-vad's shape: a scalar sample-rate input picks the branch; constants fold it, inspect says which."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 8])])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "two"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 8])])
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Equal", ["srf", "k16"], ["c1"], name="eq"),
             helper.make_node("Squeeze", ["c1"], ["cond"], name="sq"),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g, name="If_sr")]
    g = helper.make_graph(nodes, "sr_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
                                           helper.make_tensor_value_info("sr", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                          [numpy_helper.from_array(np.array([16000], np.float32), "k16"),
                           numpy_helper.from_array(np.array(2, np.float32), "two")])
    f = models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), repo / "models" / "sr.onnx")
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--json")
    assert r.returncode == 0, r.stderr
    (c,) = json.loads(r.stdout)["control_flow"]
    assert c["node"] == "If_sr" and c["condition_from"] == ["sr"] and "graphs[].constants: {sr: " in c["fix"]


def test_a_weight_copied_by_preparation_shows_in_the_parameters(repo, tmp_path):
    """A table shared by Gather and a transposed MatMul: constant folding makes a second copy, which the
    binary carries too: prepare says so, and the report counts bytes per SOURCE parameter."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32), "W")
    nodes = [helper.make_node("Gather", ["W", "ids"], ["e"], name="embed"),
             helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0], name="tied"),
             helper.make_node("MatMul", ["e", "Wt"], ["logits"], name="project")]
    g = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("ids", TensorProto.INT32, [1, 4])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4, 256])], [table])
    f = models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), repo / "models" / "tied.onnx")
    matrix = write_matrix(repo, [path_model(repo, "tied", f, chips=["SM8750"])])
    out = tmp_path / "dist"
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), env=_env(tmp_path / "c"))
    assert r.returncode == 0, r.stdout + r.stderr
    rep = _report(out)
    t = rep["targets"][0]
    assert t["source_parameters"] == 256 * 64 and t["parameters"] == 2 * 256 * 64
    assert any("constant folding made copies" in n for n in rep["prepared"][0]["notes"])
    assert t["bytes_per_source_parameter"] > 1.9 * t["bytes_per_parameter"]


def test_release_notes_say_plainly_when_there_are_no_runtime_libraries(repo, tmp_path):
    f = models.mlp(repo / "models" / "m.onnx", dynamic_batch=False)
    matrix = write_matrix(repo, [path_model(repo, "m", f, chips=["SM8750"])])
    out = tmp_path / "dist"
    env = {k: v for k, v in _env(tmp_path / "c").items() if k != "QNN_SDK_ROOT"}
    r = run_cli("build", "--matrix", str(matrix), "--out", str(out), "--package", "--tag", "v1.0.0", env=env)
    assert r.returncode == 0, r.stderr
    notes = (out / "release" / "RELEASE_NOTES.md").read_text()
    assert "**This release contains no QNN runtime libraries.**" in notes and "qnn-libs" not in notes.split(
        "## Models")[1].split("## Changes")[0]
    # the ort route compiles with the QNN of onnxruntime-qnn, not the QAIRT the matrix pins: said so, with where
    # an Android app gets a runtime that new
    assert "loads only on a QNN runtime **2.51.0 or newer**" in notes
    assert "`com.qualcomm.qti:onnxruntime-android-qnn:2.7.0`" in notes
    assert "> Warning: the binaries were compiled with QNN 2.51" in notes and "pins QAIRT 2.40.0.251030" in notes
    assert "warning: the binaries were compiled with QNN" in r.stderr


def test_inspect_finds_lengths_a_strided_detector_takes_and_the_entry_pastes_into_a_matrix(tmp_path):
    """A detector with dynamic H and W: 16 does not line up (two 1x1 maps meet a 2x2 one), so inspect tries the
    next lengths and suggests 32, says why, and never exits 70; its source and entry paste into a matrix that
    `plan` accepts. `--input` gives a shape as is; a misspelt input is one line (exit 2)."""
    from ci_tools.sources.store import sha256_file

    f = models.strided_detector(tmp_path / "det.onnx")
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["suggested_graph"]["inputs"]["x"]["shape"] == [1, 3, 32, 32]
    assert "do not line up at node 'merge' (Concat)" in report["notes"][0] and report["prepare"]["ok"]
    assert report["suggested_source"] == {"kind": "path", "path": "det.onnx", "sha256": sha256_file(f)}
    model = {"name": "det", "description": "a detector", "license": "MIT", "chips": ["SM8750"],
             "source": report["suggested_source"], "graphs": [report["suggested_graph"]]}
    r = run_cli("plan", "--matrix", str(write_matrix(tmp_path, [model])))
    assert r.returncode == 0 and "det.det.sm8750.fp16" in r.stdout, r.stderr
    model["graphs"][0]["inputs"]["x"]["shape"] = [1, 3, 16, 16]  # build says why, not "please report it"
    r = run_cli("build", "--matrix", str(write_matrix(tmp_path, [model])), "--out", str(tmp_path / "dist"),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 8 and "do not line up at node 'merge' (Concat)" in r.stderr, r.stderr
    assert "multiples of its total stride" in r.stderr and "report it" not in r.stderr
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--input", "x=1,3,64,96", "--json")
    assert json.loads(r.stdout)["suggested_graph"]["inputs"]["x"]["shape"] == [1, 3, 64, 96]
    r = run_cli("inspect", str(f), "--input", "image=1,3,64,64")
    assert r.returncode == 2 and "--input image=1,3,64,64: the model has no input 'image'" in r.stderr
    assert "internal error" not in r.stderr and "report it" not in r.stderr
    assert yaml.safe_load(yaml.safe_dump(model))  # (the entry is plain YAML)


@pytest.mark.emulator
def test_each_precision_family_gets_its_own_trial(tmp_path, monkeypatch):
    """HTP takes different ops in float and in quantized graphs: a rejection found by the fp16 trial fails the
    fp16 targets only; a w8a16 target is tried on its own QDQ graph (and compiles here)."""
    pytest.importorskip("onnxruntime_qnn")
    from ci_tools.builder.orchestrate import BuildSettings, build
    from ci_tools.compile.backends.ort import OrtBackend
    from ci_tools.compile.doctor import Diagnosis
    from ci_tools.matrix.schema import load_matrix

    tried = []

    def doctor(self, prepared, soc, quantized=None):
        tried.append("qdq" if quantized is not None else "fp16")
        return Diagnosis(rejected=[] if quantized is not None else [("Erf", "gelu_erf")])

    monkeypatch.setattr(OrtBackend, "doctor", doctor)
    (tmp_path / "models").mkdir()
    f = models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False)
    loaded = load_matrix(write_matrix(tmp_path, [path_model(tmp_path, "m", f, chips=["SM8750"],
                                                            precisions=["fp16", "w8a16"])]))
    report = build(loaded, BuildSettings(out=tmp_path / "dist", cache=tmp_path / "c"))
    by = {r.precision: r for r in report.records}
    assert by["fp16"].status == "failed" and "fp16 trial compile for SM8750" in by["fp16"].error
    assert "Erf" in by["fp16"].error and by["w8a16"].status == "ok", by["w8a16"].error
    assert sorted(tried) == ["fp16", "qdq"]


def test_a_graph_fused_by_onnx_runtime_is_named_so_and_unfuse_contrib_makes_it_compile(tmp_path):
    """A BERT block with FastGelu and SkipLayerNormalization (com.microsoft): inspect says what the graph is and
    the doctor names the fix; with `fixes: [unfuse-contrib]` prepare writes the documented formulas back as
    standard ops, its CPU parity with the original holds, and HTP takes every node."""
    pytest.importorskip("onnxruntime_qnn")
    f = models.fused_bert_block(tmp_path / "bert.onnx")
    r = run_cli("inspect", str(f), "--soc", "SM8750", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    (kind,) = report["source_kind"]
    assert kind["kind"] == "fused by ONNX Runtime's transformer optimizer"
    assert kind["ops"] == {"FastGelu": 1, "SkipLayerNormalization": 1}
    causes = {c["op"]: c for c in report["htp"][0].get("causes", [])}
    assert "unfuse-contrib" in causes["FastGelu"]["fix"], report["htp"]
    (tmp_path / "models").mkdir()
    g = models.fused_bert(tmp_path / "models" / "bert.onnx")  # a whole layer: embeddings, attention, FFN
    model = path_model(tmp_path, "bert", g, graphs=[{"name": "main", "file": "bert.onnx",
                                                     "fixes": ["unfuse-contrib"]}], chips=["SM8750"])
    r = run_cli("build", "--matrix", str(write_matrix(tmp_path, [model])), "--out", str(tmp_path / "dist"),
                env={**os.environ, "QNN_RELEASE_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "dist" / "build-report.json").read_text())
    (t,) = report["targets"]
    assert t["status"] == "ok" and t["parity"]["cosine"] > 0.999
    notes = " ".join(n for p in report["prepared"] for n in p["notes"])
    assert ("fix unfuse-contrib: EmbedLayerNormalization x1, Attention x1, SkipLayerNormalization x2, FastGelu x1 "
            "rewritten") in notes
