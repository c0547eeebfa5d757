# The tools of the fake QAIRT SDK (see tests/fake_qairt/__init__.py). One script, dispatched on
# the name it is called by, copied under every tool name with a shebang to the test interpreter.
import argparse
import base64
import hashlib
import io
import json
import os
import re
import sys
import tarfile
from pathlib import Path

TOOL = Path(sys.argv[0]).name
SDK_ROOT = Path(sys.argv[0]).resolve().parent.parent.parent
VERSION = SDK_ROOT.name
MAGIC = b"FAKEQNNCTX1\0"
LIB_MAGIC = b"\x7fELF\0FAKEQNNLIB\0"
# ops the fake HTP backend refuses (real HTP has no Erf/Acos kernels in these tests' terms)
HTP_UNSUPPORTED = {"Erf", "Acos", "Asinh", "Sinh", "Cosh"}
DTYPES = {1: ("QNN_DATATYPE_FLOAT_32", 0x0232), 6: ("QNN_DATATYPE_INT_32", 0x0032), 9: ("QNN_DATATYPE_BOOL_8", 0x0508),
          10: ("QNN_DATATYPE_FLOAT_16", 0x0216), 7: ("QNN_DATATYPE_INT_64", 0x0064)}


def fail(msg, code=1):
    print(f"[ ERROR ] {TOOL}: {msg}", file=sys.stderr)
    sys.exit(code)


def sanitize(name):
    """QNN tensor names: [A-Za-z0-9_] only, not starting with a digit."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "_" + s if s[:1].isdigit() else s


class Parser(argparse.ArgumentParser):
    def error(self, message):
        fail(f"argument error: {message}", 2)


def converter():
    p = Parser(prog=TOOL)
    p.add_argument("--input_network", "-i", required=True)
    p.add_argument("--output_path", "-o", required=True)
    p.add_argument("--act_bitwidth", type=int, choices=[8, 16], default=8)
    p.add_argument("--bias_bitwidth", type=int, choices=[8, 32], default=8)
    p.add_argument("--weights_bitwidth", type=int, choices=[4, 8], default=8)
    p.add_argument("--float_bitwidth", type=int, choices=[16, 32], default=32)
    p.add_argument("--input_list")
    p.add_argument("--use_native_input_files", action="store_true")
    a = p.parse_args()
    import onnx

    if not a.output_path.endswith(".cpp"):
        fail("--output_path must name a .cpp file")
    try:
        model = onnx.load(a.input_network)
    except Exception as e:
        fail(f"cannot load {a.input_network}: {e}")
    init = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init]
    for i in inputs:
        if any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim):
            fail(f"input {i.name} has a dynamic shape; pass --input_dim or fix the model")
    quantized = a.input_list is not None
    if quantized:
        lines = [ln.split() for ln in Path(a.input_list).read_text().splitlines() if ln.strip()]
        if not lines:
            fail(f"--input_list {a.input_list} is empty")
        for line in lines:
            if len(line) != len(inputs):
                fail(f"--input_list line has {len(line)} files, the network has {len(inputs)} inputs")
            for entry in line:
                path = entry.split(":=", 1)[-1]
                if not Path(path).is_file():
                    fail(f"--input_list names a missing file {path}")
    print(f"[ INFO ] converting {a.input_network}: {len(model.graph.node)} nodes")
    if quantized and a.act_bitwidth == 8:
        print("[ WARNING ] 8-bit activations: check the accuracy of the quantized graph")
    out = Path(a.output_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    name = out.stem
    tensors = {}
    for idx, v in enumerate(inputs):
        tensors[sanitize(v.name)] = {"id": idx, "type": 0, "dims": [d.dim_value for d in v.type.tensor_type.shape.dim],
                                     "data_type": DTYPES[v.type.tensor_type.elem_type][1],
                                     "quant_params": {"definition": 0, "encoding": 0}}
    for idx, v in enumerate(model.graph.output):
        tensors[sanitize(v.name)] = {"id": 1000 + idx, "type": 1,
                                     "dims": [d.dim_value for d in v.type.tensor_type.shape.dim],
                                     "data_type": DTYPES[v.type.tensor_type.elem_type][1],
                                     "quant_params": {"definition": 0, "encoding": 0}}
    precision = (("fp16" if a.float_bitwidth == 16 else "fp32") if not quantized
                 else f"a{a.act_bitwidth}w{a.weights_bitwidth}")
    net = {"model.cpp": out.name, "model.bin": f"{name}.bin", "converter_command": " ".join(sys.argv[1:]),
           "graph": {"name": name, "tensors": tensors, "nodes": {n.name or f"n{i}": {"type": n.op_type}
                                                                  for i, n in enumerate(model.graph.node)}},
           "fake": {"precision": precision, "input_order": [v.name for v in inputs],
                    "outputs": [v.name for v in model.graph.output]}}
    (out.parent / f"{name}_net.json").write_text(json.dumps(net, indent=1))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = model.SerializeToString()
        info = tarfile.TarInfo("model.onnx")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (out.parent / f"{name}.bin").write_bytes(buf.getvalue())
    out.write_text(f"/* Command Line used:\nqnn-onnx-converter {' '.join(sys.argv[1:])}\n*/\n"
                   f'#include "QnnModel.hpp"\n// graph {name}: {len(model.graph.node)} nodes\n')


def lib_generator():
    p = Parser(prog=TOOL)
    p.add_argument("-c", "--cpp", required=True)
    p.add_argument("-b", "--bin", required=True)
    p.add_argument("-o", "--output_dir", required=True)
    p.add_argument("-t", "--lib_targets", nargs="*", default=["x86_64-linux-clang", "aarch64-android"])
    a = p.parse_args()
    cpp, weights = Path(a.cpp), Path(a.bin)
    for f in (cpp, weights):
        if not f.is_file():
            fail(f"{f} does not exist")
    net = json.loads((cpp.parent / f"{cpp.stem}_net.json").read_text())
    ldflags = os.environ.get("LDFLAGS", "")
    payload = {"graph": cpp.stem, "net": net, "weights": base64.b64encode(weights.read_bytes()).decode()}
    for target in a.lib_targets:
        if target == "aarch64-android" and "max-page-size=16384" not in ldflags:
            print("[ WARNING ] aarch64-android library linked without 16 KB pages (Android 15+ needs them)")
        d = Path(a.output_dir) / target
        d.mkdir(parents=True, exist_ok=True)
        (d / f"lib{cpp.stem}.so").write_bytes(LIB_MAGIC + json.dumps({**payload, "target": target,
                                                                       "ldflags": ldflags}).encode())
    print(f"[ INFO ] model libraries in {a.output_dir}")


def _load_lib(path):
    data = Path(path).read_bytes()
    if not data.startswith(LIB_MAGIC):
        fail(f"{path} is not a model library built by qnn-model-lib-generator")
    return json.loads(data[len(LIB_MAGIC):])


def context_generator():
    p = Parser(prog=TOOL)
    p.add_argument("--backend", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--output_dir", default="./output")
    p.add_argument("--binary_file", required=True)
    p.add_argument("--config_file")
    a = p.parse_args()
    backend = Path(a.backend).resolve()
    if backend != (SDK_ROOT / "lib" / "x86_64-linux-clang" / "libQnnHtp.so").resolve() or not backend.is_file():
        fail(f"--backend {a.backend}: expected $QNN_SDK_ROOT/lib/x86_64-linux-clang/libQnnHtp.so")
    lib = _load_lib(a.model)
    if lib["target"] != "x86_64-linux-clang":
        fail("--model must be the x86_64-linux-clang model library")
    if a.binary_file.endswith(".bin"):
        fail("--binary_file takes a name without extension")
    if not a.config_file:
        fail("no --config_file: the HTP backend would compile for no particular SoC")
    ext = json.loads(Path(a.config_file).read_text())["backend_extensions"]
    if not Path(ext["shared_library_path"]).is_file() or not ext["shared_library_path"].endswith(
            "lib/x86_64-linux-clang/libQnnHtpNetRunExtensions.so"):
        fail(f"backend_extensions.shared_library_path {ext['shared_library_path']} is not the SDK's extensions lib")
    cfg = json.loads(Path(ext["config_file_path"]).read_text())
    graphs = cfg["graphs"][0] if isinstance(cfg["graphs"], list) else cfg["graphs"]
    if lib["graph"] not in graphs["graph_names"]:
        fail(f"htp_config.json: graph_names {graphs['graph_names']} does not contain the graph {lib['graph']}")
    device = cfg["devices"][0]
    soc_id, dsp_arch = int(device["soc_id"]), device["dsp_arch"]
    if not re.fullmatch(r"v(68|69|73|75|79|81)", dsp_arch):
        fail(f"htp_config.json: unknown dsp_arch {dsp_arch}")
    precision = lib["net"]["fake"]["precision"]
    if precision == "fp16" and dsp_arch == "v68":
        fail("graph validation failed: FP16 is not supported on v68")
    rejected = [f"{t['type']} ({n})" for n, t in lib["net"]["graph"]["nodes"].items() if t["type"] in HTP_UNSUPPORTED]
    if rejected:
        fail(f"graph validation failed: op(s) not supported by the HTP backend: {', '.join(rejected)}")
    header = {"graph": lib["graph"], "soc_id": soc_id, "dsp_arch": dsp_arch, "vtcm_mb": graphs.get("vtcm_mb"),
              "O": graphs.get("O"), "build_id": f"v{VERSION}", "net": lib["net"]}
    out = Path(a.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    blob = MAGIC + json.dumps(header).encode() + b"\0" + base64.b64decode(lib["weights"])
    (out / f"{a.binary_file}.bin").write_bytes(blob)
    print(f"[ INFO ] wrote {out / (a.binary_file + '.bin')} for {dsp_arch} soc {soc_id}")


def _load_ctx(path):
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        fail(f"{path} is not a QNN context binary")
    head, _, weights = data[len(MAGIC):].partition(b"\0")
    return json.loads(head), weights


def _tensor_info(name, t):
    dtype = next(k for k, v in DTYPES.items() if v[1] == t["data_type"])
    return {"info": {"id": t["id"], "name": name, "type": "QNN_TENSOR_TYPE_APP_WRITE" if t["type"] == 0
                     else "QNN_TENSOR_TYPE_APP_READ", "dataType": DTYPES[dtype][0], "dimensions": t["dims"],
                     "quantizeParams": {"definition": "QNN_DEFINITION_UNDEFINED",
                                        "quantizationEncoding": "QNN_QUANTIZATION_ENCODING_UNDEFINED"}}}


def context_utility():
    p = Parser(prog=TOOL)
    p.add_argument("--context_binary", required=True)
    p.add_argument("--json_file", required=True)
    a = p.parse_args()
    head, _ = _load_ctx(a.context_binary)
    tensors = head["net"]["graph"]["tensors"]
    graph = {"info": {"graphName": head["graph"],
                      "graphInputs": [_tensor_info(n, t) for n, t in sorted(tensors.items(), key=lambda x: x[1]["id"])
                                      if t["type"] == 0],
                      "graphOutputs": [_tensor_info(n, t) for n, t in sorted(tensors.items(), key=lambda x: x[1]["id"])
                                       if t["type"] == 1]}}
    info = {"info": {"backendId": 6, "buildId": head["build_id"], "coreApiVersion": "2.x",
                     "contextBlobSize": Path(a.context_binary).stat().st_size,
                     "socModel": head["soc_id"], "dspArch": head["dsp_arch"], "graphs": [graph]}}
    Path(a.json_file).write_text(json.dumps(info, indent=1))


def net_run():
    import numpy as np
    import onnxruntime as ort

    p = Parser(prog=TOOL)
    p.add_argument("--backend", required=True)
    p.add_argument("--retrieve_context")
    p.add_argument("--model")
    p.add_argument("--input_list", required=True)
    p.add_argument("--output_dir", default="./output")
    p.add_argument("--use_native_input_files", action="store_true")
    p.add_argument("--use_native_output_files", action="store_true")
    a = p.parse_args()
    if not a.retrieve_context:
        fail("this fake runs context binaries only: pass --retrieve_context")
    head, weights = _load_ctx(a.retrieve_context)
    with tarfile.open(fileobj=io.BytesIO(weights)) as tar:
        onnx_bytes = tar.extractfile("model.onnx").read()
    sess = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    fake = head["net"]["fake"]
    specs = {i.name: i for i in sess.get_inputs()}
    np_types = {"tensor(float)": np.float32, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
                "tensor(bool)": np.bool_}
    lines = [ln.split() for ln in Path(a.input_list).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    for i, line in enumerate(lines):
        feeds = {}
        for name, entry in zip(fake["input_order"], line):
            if ":=" in entry:
                qname, entry = entry.split(":=", 1)
                if qname != sanitize(name):
                    fail(f"input_list names tensor {qname}, the graph has {sanitize(name)}")
            dt = np_types[specs[name].type] if a.use_native_input_files else np.float32
            feeds[name] = np.fromfile(entry, dtype=dt).reshape(specs[name].shape).astype(np_types[specs[name].type])
        outs = sess.run(None, feeds)
        d = Path(a.output_dir) / f"Result_{i}"
        d.mkdir(parents=True, exist_ok=True)
        for name, value in zip(fake["outputs"], outs):
            v = np.asarray(value, dtype=np.float32)
            if fake["precision"] == "fp16":
                v = v.astype(np.float16).astype(np.float32)
            elif fake["precision"].startswith("a"):
                bits = int(fake["precision"][1:].split("w")[0])
                lo, hi = float(v.min()), float(v.max())
                scale = (hi - lo) / (2 ** bits - 1) or 1.0
                v = (np.round((v - lo) / scale) * scale + lo).astype(np.float32)
            v.tofile(d / f"{sanitize(name)}.raw")
    digest = hashlib.sha256(Path(a.retrieve_context).read_bytes()).hexdigest()[:12]
    print(f"[ INFO ] ran {len(lines)} inputs on the HTP simulator stand-in (context {digest})")


# Test fault injection, not a behaviour of the real tools: FAKE_QAIRT_FAIL=<tool name> makes that tool fail.
if os.environ.get("FAKE_QAIRT_FAIL") == TOOL:
    fail("injected failure (FAKE_QAIRT_FAIL)")

{"qnn-onnx-converter": converter, "qnn-model-lib-generator": lib_generator,
 "qnn-context-binary-generator": context_generator, "qnn-context-binary-utility": context_utility,
 "qnn-net-run": net_run}.get(TOOL, lambda: fail("unknown tool"))()
