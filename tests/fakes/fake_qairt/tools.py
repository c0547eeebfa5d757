# The tools of the fake QAIRT SDK (see tests/fakes/fake_qairt/__init__.py). One script, dispatched on
# the name it is called by, copied under every tool name with a shebang to the test interpreter.
#
# Every rule cites its evidence (research notes: /work/research/qairt-evidence.md in the session
# that wrote it; the sources are public):
#   [SDK]  QAIRT 2.25.0.240728 as published in qdsp6sw/qualcomm-ai-engine-direct-sdk@e32f4b4
#          (converter Python under lib/python/qti/aisw/converters, docs/QNN/general/*.html)
#   [qd]   Qualcomm's qairt-dev 0.13.0 wheel (PyPI)
#   [sh]   k2-fsa/sherpa-onnx@634265c9b (.github/workflows/export-*-qnn.yaml, scripts/qnn/)
#   [ORT]  onnxruntime-qnn onnxruntime/python/tools/qnn/gen_qnn_ctx_onnx_model.py @cee6c0d
#   [REF]  shared/REFERENCE.md (verified on this project's machines)
# What is fake: binaries carry the ONNX graph instead of Hexagon code, and qnn-net-run stands in
# for the HTP simulator by running that graph with ONNX Runtime on CPU, rounded to the precision.
import argparse
import base64
import io
import json
import os
import re
import shutil
import sys
import tarfile
from pathlib import Path

TOOL = Path(sys.argv[0]).name
SDK_ROOT = Path(sys.argv[0]).resolve().parent.parent.parent
VERSION = SDK_ROOT.name
MAGIC = b"FAKEQNNCTX2\0"
LIB_MAGIC = b"\x7fELF\0FAKEQNNLIB2\0"
# [SDK include/QNN/QnnTypes.h:52-91] data type codes; the utility prints the enum names [ORT:39-111]
CODES = {"QNN_DATATYPE_INT_8": 0x0008, "QNN_DATATYPE_INT_16": 0x0016, "QNN_DATATYPE_INT_32": 0x0032,
         "QNN_DATATYPE_INT_64": 0x0064, "QNN_DATATYPE_UINT_8": 0x0108, "QNN_DATATYPE_UINT_16": 0x0116,
         "QNN_DATATYPE_UINT_32": 0x0132, "QNN_DATATYPE_FLOAT_16": 0x0216, "QNN_DATATYPE_FLOAT_32": 0x0232,
         "QNN_DATATYPE_UFIXED_POINT_8": 0x0408, "QNN_DATATYPE_UFIXED_POINT_16": 0x0416,
         "QNN_DATATYPE_BOOL_8": 0x0508}
NAMES = {v: k for k, v in CODES.items()}
ONNX_TO_QNN = {1: "QNN_DATATYPE_FLOAT_32", 6: "QNN_DATATYPE_INT_32", 7: "QNN_DATATYPE_INT_64", 9: "QNN_DATATYPE_BOOL_8",
               10: "QNN_DATATYPE_FLOAT_16", 2: "QNN_DATATYPE_UINT_8", 3: "QNN_DATATYPE_INT_8",
               4: "QNN_DATATYPE_UINT_16", 5: "QNN_DATATYPE_INT_16"}
NP = {"QNN_DATATYPE_FLOAT_32": "float32", "QNN_DATATYPE_FLOAT_16": "float16", "QNN_DATATYPE_INT_32": "int32",
      "QNN_DATATYPE_INT_64": "int64", "QNN_DATATYPE_BOOL_8": "bool", "QNN_DATATYPE_UINT_8": "uint8",
      "QNN_DATATYPE_INT_8": "int8", "QNN_DATATYPE_UINT_16": "uint16", "QNN_DATATYPE_INT_16": "int16",
      "QNN_DATATYPE_UFIXED_POINT_8": "uint8", "QNN_DATATYPE_UFIXED_POINT_16": "uint16"}
# [SDK op_graph.py:104-116, axis_tracker.py:719-727] the source layout an ONNX tensor gets by rank, and
# [SDK op_graph_optimizations.py:1950-1975] what qnn-onnx-converter (spatial-first) makes of it
SOURCE_FORMAT = {1: "ANY", 2: "NF", 3: "NCF", 4: "NCHW", 5: "NCDHW"}
SPATIAL_FIRST = {"NCHW": ("NHWC", [0, 2, 3, 1]), "NCF": ("NFC", [0, 2, 1]), "TNF": ("NTF", [1, 0, 2]),
                 "NCDHW": ("NDHWC", [0, 2, 3, 4, 1])}
LAYOUTS = ("NCDHW", "NDHWC", "NCHW", "NHWC", "NFC", "NCF", "NTF", "TNF", "NF", "NC", "F", "NONTRIVIAL")
# INFERRED, not from the QAIRT tools: with onnxruntime-qnn 2.7.0 (QNN 2.51) a GELU's Erf after conv1 stays off
# HTP ([REF §4]); whether 2.40's context-binary-generator refuses it is not documented. Kept so the route's
# handling of a refused op is exercised; a stricter model may drop it.
HTP_UNSUPPORTED = {"Erf"}


def fail(msg, code=1):
    print(f"[ ERROR ] {TOOL}: {msg}", file=sys.stderr)
    sys.exit(code)


def sanitize(name):
    """[SDK backend/ir_to_qnn.py:133-142]: runs of non-word characters -> '_', '_' prefix unless alpha."""
    name = re.sub(r"\W+", "_", name)
    return name if name[:1].isalpha() else "_" + name


class Parser(argparse.ArgumentParser):
    def error(self, message):
        fail(f"argument error: {message}", 2)


def _perm(fmt_from, fmt_to):
    if fmt_from == fmt_to:
        return None
    to, perm = SPATIAL_FIRST[fmt_from]
    assert to == fmt_to
    return perm


def _inverse(perm):
    return [perm.index(i) for i in range(len(perm))]


def converter():
    # [SDK lib/python/.../ir_to_qnn.py:25-29]: the converter imports qti.aisw.converters from
    # $QNN_SDK_ROOT/lib/python and exits 1 without it (envsetup.sh puts it on PYTHONPATH)
    try:
        import qti.aisw.converters  # noqa: F401
    except ImportError:
        print("[ ERROR ] Please ensure that $QNN_SDK_ROOT/lib/python/ is in your PYTHONPATH", file=sys.stderr)
        sys.exit(1)
    p = Parser(prog=TOOL)
    # [SDK converters/common/common_base.py:33-36, backend_base.py:19-24, qnn_quantizer.py:29-122,
    #  converter_base.py:90-126]; --preserve_io_datatype is qairt-converter's only (converter_base.py:218)
    p.add_argument("--input_network", "-i", required=True)
    p.add_argument("--output_path", "-o")
    p.add_argument("--act_bitwidth", "--act_bw", type=int, choices=[8, 16], default=8)
    p.add_argument("--bias_bitwidth", "--bias_bw", type=int, choices=[8, 32], default=8)
    p.add_argument("--weights_bitwidth", "--weight_bw", type=int, choices=[4, 8], default=8)
    p.add_argument("--float_bitwidth", type=int, choices=[16, 32], default=32)
    p.add_argument("--float_bias_bitwidth", type=int, choices=[0, 16, 32], default=0)
    p.add_argument("--input_list")
    p.add_argument("--use_native_input_files", action="store_true")
    p.add_argument("--float_fallback", action="store_true")
    # [SDK qnn_quantizer.py:104-109] per-channel (convolution weights) and per-row (MatMul/FullyConnected)
    p.add_argument("--use_per_channel_quantization", action="store_true")
    p.add_argument("--use_per_row_quantization", action="store_true")
    p.add_argument("--input_layout", "-l", nargs=2, action="append", default=[])
    p.add_argument("--preserve_io", nargs="*", action="append", default=[])
    a = p.parse_args()
    import numpy as np
    import onnx

    if not Path(a.input_network).is_file():
        fail(f"--input_network {a.input_network} does not exist")
    try:
        model = onnx.load(a.input_network)
    except Exception as e:
        fail(f"cannot load {a.input_network}: {e}")
    # [SDK converter_base.py:111-126, op_graph.py:668-691] --preserve_io [layout|datatype] [names...]
    keep = {"layout": set(), "datatype": set()}
    keep_all = set()
    for item in a.preserve_io:
        if not item:
            keep_all |= {"layout", "datatype"}
        elif item[0] in keep:
            if len(item) == 1:
                keep_all.add(item[0])
            else:
                keep[item[0]] |= set(item[1:])
        else:
            fail("Incorrect usage of the --preserve_io option.")
    for kind in keep:
        if kind in keep_all and keep[kind]:
            fail(f"--preserve_io {kind}: give either all tensors or a list of names, not both")
    layouts = {}
    for name, layout in a.input_layout:
        if layout not in LAYOUTS:
            fail(f"--input_layout {name} {layout}: expected one of {', '.join(LAYOUTS)}")
        layouts[name] = layout
    init = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init]
    for i in inputs:
        if any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim):
            fail(f"input {i.name} has a dynamic shape; pass --input_dim or fix the model")
    # [SDK qnn_quantizer.py:29-37] "All subsequent quantization options are ignored when this is not provided"
    quantized = a.input_list is not None
    out = Path(a.output_path) if a.output_path else Path(a.input_network).with_suffix(".cpp")
    out.parent.mkdir(parents=True, exist_ok=True)
    # [SDK qnn_backend_base.py:522-523] the graph is named after the output stem, sanitized [sh
    # export-sense-voice-to-qnn.yaml:286,313: model-$t-seconds-quantized -> model_${t}_seconds_quantized]
    graph_name = sanitize(Path(out.name).stem)

    def layout_of(v, is_input):
        rank = len(v.type.tensor_type.shape.dim)
        src = SOURCE_FORMAT.get(rank, "NONTRIVIAL")
        if is_input:
            src = layouts.get(v.name, src)
        preserved = "layout" in keep_all or v.name in keep["layout"]
        # [SDK op_graph_optimizations.py:1950-1975] inputs are permuted spatial-first; outputs keep the
        # producing buffer's (channel-last) format unless preserved [op_graph_optimizations.py:1130-1172]
        dst = src if preserved or src not in SPATIAL_FIRST else SPATIAL_FIRST[src][0]
        return src, dst

    calib = _calibration(a, model, inputs, layout_of) if quantized else None
    ref_outputs = _run_onnx(model, calib) if calib else None
    tensors = {}
    for kind, values in ((0, inputs), (1, list(model.graph.output))):
        for idx, v in enumerate(values):
            src, dst = layout_of(v, kind == 0)
            dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
            perm = _perm(src, dst)
            qdims = [dims[i] for i in perm] if perm else dims
            dtype = ONNX_TO_QNN[v.type.tensor_type.elem_type]
            keep_type = "datatype" in keep_all or v.name in keep["datatype"]
            qp = {"definition": 0, "encoding": 0, "scale_offset": {"scale": 0.0, "offset": 0}}
            if dtype == "QNN_DATATYPE_FLOAT_32" and not keep_type:
                if quantized:
                    # [ORT:294-297] "8 bits or 16 bits for input and output"; offset = -zero_point [ORT:144]
                    dtype = f"QNN_DATATYPE_UFIXED_POINT_{a.act_bitwidth}"
                    data = (np.concatenate([np.ravel(s[v.name]) for s in calib]) if kind == 0
                            else np.concatenate([np.ravel(o[idx]) for o in ref_outputs]))
                    lo, hi = min(float(data.min()), 0.0), max(float(data.max()), 0.0)
                    scale = (hi - lo) / (2 ** a.act_bitwidth - 1) or 1e-8
                    qp = {"definition": 1, "encoding": 0,
                          "scale_offset": {"scale": scale, "offset": round(lo / scale)}}
                elif a.float_bitwidth == 16:
                    # [SDK qnn_backend_base.py:129-135,235-239] float_bitwidth 16 applies to every float tensor
                    dtype = "QNN_DATATYPE_FLOAT_16"
            tensors[sanitize(v.name)] = {"id": (0 if kind == 0 else 1000) + idx, "type": kind, "dataFormat": 0,
                                         "data_type": CODES[dtype], "src_axis_format": src, "axis_format": dst,
                                         "quant_params": qp, "dims": qdims}
    precision = ("fp16" if a.float_bitwidth == 16 else "fp32") if not quantized else f"a{a.act_bitwidth}"
    print(f"[ INFO ] converting {a.input_network}: {len(model.graph.node)} nodes")
    if quantized and a.act_bitwidth == 8:
        print("[ WARNING ] 8-bit activations: check the accuracy of the quantized graph")
    # [SDK ir_to_qnn.py:267-283] _net.json keys; [converters.txt:342-432] per tensor dims/data_type/quant_params
    net = {"model.cpp": out.name, "model.bin": f"{out.stem}.bin", "converter_command": " ".join(sys.argv[1:]),
           "copyright_str": "fake", "op_types": sorted({n.op_type for n in model.graph.node}),
           "Total parameters": "0", "graph": {"tensors": tensors, "nodes": {
               n.name or f"n{i}": {"type": n.op_type} for i, n in enumerate(model.graph.node)}}}
    (out.parent / f"{out.stem}_net.json").write_text(json.dumps(net, indent=1))
    # [SDK ir_to_qnn.py:461-467] the .bin (a tar of static tensors' .raw files) only when there are some
    if model.graph.initializer:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for t in model.graph.initializer:
                data = onnx.numpy_helper.to_array(t).tobytes()
                info = tarfile.TarInfo(f"{sanitize(t.name)}.raw")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        (out.parent / f"{out.stem}.bin").write_bytes(buf.getvalue())
    else:
        print("[ WARNING ] No raw files found for Model. Saving Model BIN skipped.")
    payload = {"graph": graph_name, "precision": precision, "net": net,
               "onnx": base64.b64encode(model.SerializeToString()).decode(),
               "inputs": [v.name for v in inputs], "outputs": [v.name for v in model.graph.output]}
    out.write_text(f"/* Command Line used:\nqnn-onnx-converter {' '.join(sys.argv[1:])}\n*/\n"
                   f'#include "QnnModel.hpp"\n// graph {graph_name}\n// FAKE {json.dumps(payload)}\n')


def _calibration(a, model, inputs, layout_of):
    import numpy as np

    lines = [ln.split() for ln in Path(a.input_list).read_text().splitlines() if ln.strip() and ln[0] != "#"]
    if not lines:
        fail(f"--input_list {a.input_list} is empty")
    samples = []
    for line in lines:
        if len(line) != len(inputs):
            fail(f"--input_list line has {len(line)} files, the network has {len(inputs)} inputs")
        sample = {}
        for v, entry in zip(inputs, line):
            # named (name:=path) or positional entries [qd _convert.py:393-417, SDK aimet adapter :113-116]
            name, _, path = entry.rpartition(":=")
            if name and name not in (v.name, sanitize(v.name)):
                fail(f"--input_list names tensor {name}, the network's input is {v.name}")
            if not Path(path).is_file():
                fail(f"--input_list names a missing file {path}")
            dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
            src, dst = layout_of(v, True)
            perm = _perm(src, dst)
            qdims = [dims[i] for i in perm] if perm else dims
            # [SDK qnn_quantizer.py:119-122] native files are read in the model's own dtype, else float32
            dt = NP[ONNX_TO_QNN[v.type.tensor_type.elem_type]] if a.use_native_input_files else "float32"
            raw = np.fromfile(path, dtype=dt)
            if raw.size != int(np.prod(qdims)):
                fail(f"{path}: {raw.size} values, input {v.name} needs {int(np.prod(qdims))} ({qdims})")
            x = raw.reshape(qdims)
            if perm:
                x = np.transpose(x, _inverse(perm))
            sample[v.name] = x.astype(NP[ONNX_TO_QNN[v.type.tensor_type.elem_type]])
        samples.append(sample)
    return samples


def _run_onnx(model, samples):
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [sess.run(None, s) for s in samples]


def _read_cpp_payload(cpp):
    text = Path(cpp).read_text()
    m = re.search(r"^// FAKE (.*)$", text, re.M)
    if not m:
        fail(f"{cpp} was not written by qnn-onnx-converter")
    return json.loads(m[1])


def lib_generator():
    p = Parser(prog=TOOL)
    # [SDK bin/x86_64-linux-clang/qnn-model-lib-generator:24,357-369,415-470]
    p.add_argument("-c", "--cpp", required=True)
    p.add_argument("-b", "--bin")
    p.add_argument("-t", "--lib_targets", nargs="+", action="append")
    p.add_argument("-l", "--lib_name")
    p.add_argument("-o", "--output_dir", default=str(Path.cwd() / "lib"))
    a = p.parse_args()
    cpp = Path(a.cpp)
    if cpp.suffix != ".cpp" or not cpp.is_file():
        fail(f"-c {a.cpp}: expected an existing .cpp file")
    if a.bin is not None and (not a.bin.endswith(".bin") or not Path(a.bin).is_file()):
        fail(f"-b {a.bin}: expected an existing .bin file")
    if a.bin is None:
        print("[ WARNING ] No .bin given: Runtime will fail if .cpp needs data from a .bin")
    payload = _read_cpp_payload(cpp)
    targets = [t for group in a.lib_targets for t in group] if a.lib_targets else ["x86_64-linux-clang",
                                                                                   "aarch64-android"]
    name = a.lib_name or (Path(a.bin).stem if a.bin else "qnn_model")
    for target in targets:
        if target not in ("x86_64-linux-clang", "aarch64-android"):
            fail(f"-t {target}: not a target of this SDK on Linux")
        # [SDK qnn-model-lib-generator:204-205] aarch64-android runs `ndk-build` from PATH; a missing
        # library afterwards fails the whole command (:134-137)
        if target == "aarch64-android" and shutil.which("ndk-build") is None:
            print("/bin/sh: 1: ndk-build: not found", file=sys.stderr)
            fail("RuntimeError: Failed to compile model library for target: aarch64-android")
        d = Path(a.output_dir) / target
        d.mkdir(parents=True, exist_ok=True)
        (d / f"lib{name}.so").write_bytes(LIB_MAGIC + json.dumps({**payload, "target": target}).encode())
    print(f"[ INFO ] model libraries in {a.output_dir}")


def _load_lib(path):
    data = Path(path).read_bytes()
    if not data.startswith(LIB_MAGIC):
        fail(f"{path} is not a model library built by qnn-model-lib-generator")
    return json.loads(data[len(LIB_MAGIC):])


def _on_phone_backend(name, head):
    """``qnn-net-run`` of ``bin/aarch64-android`` on a phone: ``--backend libQnnHtp.so`` is opened through
    ``LD_LIBRARY_PATH`` (dlopen), the Stub of the binary's HTP arch too, and its Skel through ``ADSP_LIBRARY_PATH``
    (semicolon-separated) [LiteRT LITERT_QNN_NATIVE_RUN.md; QAIRT 2.39 docs, ADSP_LIBRARY_PATH]. The Stub, the
    Skel and libQnnHtp must come from one SDK build [pytorch/executorch#8762: "Stub lib id mismatch"], at least
    the one that built the binary [qualcomm/ai-hub-apps#148]. Each library of this fake SDK names its build."""
    def find(lib, dirs, what):
        for d in dirs:
            f = Path(d) / lib
            if f.is_file():
                return f
        fail(f"Unable to load {lib} ({what}: {';'.join(dirs) or 'unset'})")

    ld = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    adsp = [d for d in os.environ.get("ADSP_LIBRARY_PATH", "").split(";") if d]
    arch = head["dsp_arch"]
    builds = {}
    for lib, dirs, what in ((name, ld, "LD_LIBRARY_PATH"), (f"libQnnHtpV{arch}Stub.so", ld, "LD_LIBRARY_PATH"),
                            (f"libQnnHtpV{arch}Skel.so", adsp, "ADSP_LIBRARY_PATH")):
        text = find(lib, dirs, what).read_bytes().decode("latin-1")
        m = re.search(r"fake QAIRT (\S+) lib/(aarch64-android|hexagon-v\d+/unsigned)/", text)
        if not m:
            fail(f"{lib}: not a library for a phone (aarch64-android or hexagon)")
        builds[lib] = m[1]
    if len(set(builds.values())) != 1:
        fail(f"Stub lib id mismatch: {builds}")
    runtime = next(iter(builds.values()))

    def core(v):  # major.minor.patch and the build date (a build id goes on with a time and a number)
        return tuple(int(x) for x in re.match(r"v?(\d+)\.(\d+)\.(\d+)\.(\d{6})", v).groups())

    built = ".".join(map(str, core(head["build_id"])))
    if core(runtime) < core(built):
        fail(f"Failed to create context from binary: QNN_CONTEXT_ERROR_BINARY_VERSION (built with {built}, "
             f"runtime {runtime})")


def _check_backend(path, head=None):
    if head is not None and "/" not in path:  # a bare library name: qnn-net-run on a phone, found by dlopen
        return _on_phone_backend(path, head)
    backend = Path(path).resolve()
    if backend != (SDK_ROOT / "lib" / "x86_64-linux-clang" / "libQnnHtp.so").resolve() or not backend.is_file():
        fail(f"--backend {path}: expected $QNN_SDK_ROOT/lib/x86_64-linux-clang/libQnnHtp.so")


def context_generator():
    p = Parser(prog=TOOL)
    # [SDK docs tools.txt:2242-2335]; sh export-sense-voice-to-qnn.yaml:321-326
    p.add_argument("--backend", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--output_dir", default="./output")
    p.add_argument("--binary_file", required=True)
    p.add_argument("--config_file")
    a = p.parse_args()
    _check_backend(a.backend)
    lib = _load_lib(a.model)
    if lib["target"] != "x86_64-linux-clang":
        fail("--model must be the x86_64-linux-clang model library")
    graph = lib["graph"]
    # [SDK htp_backend.txt:333-341] without a config the HTP device option SOC defaults to SM8350 (30)
    # and the arch to NONE; vtcm defaults to 4 MB [tools.txt:2720] (what the binary then holds: inferred)
    soc_model, arch, vtcm, opt, applied = 30, 0, 4, 2, False
    if a.config_file:
        ext = json.loads(Path(a.config_file).read_text())["backend_extensions"]
        if not Path(ext["shared_library_path"]).is_file() or not ext["shared_library_path"].endswith(
                "lib/x86_64-linux-clang/libQnnHtpNetRunExtensions.so"):
            fail(f"backend_extensions.shared_library_path {ext['shared_library_path']} is not the SDK's extensions lib")
        cfg = json.loads(Path(ext["config_file_path"]).read_text())
        for g in cfg.get("graphs", []):
            # [tools.txt:2723-2724,2737] graph options apply only to the graph named as the converter named it
            if graph in g.get("graph_names", []):
                vtcm, opt, applied = g.get("vtcm_mb", vtcm), g.get("O", opt), True
        for device in cfg.get("devices", [])[:1]:
            # [SDK htp_backend.txt:1253-1347] soc_model sets the SoC; "soc_id parameter will be deprecated"
            # (qd writes soc_model: qairt/api/compiler/config.py:808-821); dsp_arch is a string "v79"
            soc_model = int(device.get("soc_model", 0))
            dsp = device.get("dsp_arch", "")
            if dsp and not re.fullmatch(r"v(66|68|69|73|75|79|81|85)", str(dsp)):
                fail(f"htp_config.json: unknown dsp_arch {dsp}")
            arch = int(str(dsp)[1:]) if dsp else 0
    types = {t["data_type"] for t in lib["net"]["graph"]["tensors"].values()}
    if arch == 68 and (lib["precision"] == "fp16" or CODES["QNN_DATATYPE_FLOAT_16"] in types):
        # [REF §4] verified: fp16 on v68 (SM8350) fails validation
        fail("graph validation failed: FP16 is not supported on v68")
    rejected = [f"{t['type']} ({n})" for n, t in lib["net"]["graph"]["nodes"].items() if t["type"] in HTP_UNSUPPORTED]
    if rejected:
        fail(f"graph validation failed: op(s) not supported by the HTP backend: {', '.join(rejected)}")
    # [SDK include/QNN/QnnSdkBuildId.h:17] buildId = v<version><HHMMSS>_<build>, e.g. v2.25.0.240728104910_97711
    header = {"graph": graph, "soc_model": soc_model, "dsp_arch": arch, "vtcm_mb": vtcm, "O": opt,
              "graph_config_applied": applied, "build_id": f"v{VERSION}104910_97711", "lib": lib}
    out = Path(a.binary_file) if Path(a.binary_file).is_absolute() else Path(a.output_dir) / a.binary_file
    out = out.with_name(out.name + ".bin")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(MAGIC + json.dumps(header).encode())
    print(f"[ INFO ] wrote {out} for v{arch} soc_model {soc_model}")


def _load_ctx(path):
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        fail(f"{path} is not a QNN context binary")
    return json.loads(data[len(MAGIC):])


def _tensor_info(name, t):
    qp = t["quant_params"]
    defined = qp["definition"] == 1
    # [ORT:251-290, qd cache_module.py:98-201] the utility JSON: dataType as an enum name, quantizeParams
    return {"info": {"id": t["id"], "name": name,
                     "type": "QNN_TENSOR_TYPE_APP_WRITE" if t["type"] == 0 else "QNN_TENSOR_TYPE_APP_READ",
                     "dataType": NAMES[t["data_type"]], "dimensions": t["dims"],
                     "quantizeParams": {
                         "definition": "QNN_DEFINITION_DEFINED" if defined else "QNN_DEFINITION_UNDEFINED",
                         "quantizationEncoding": "QNN_QUANTIZATION_ENCODING_SCALE_OFFSET" if defined
                         else "QNN_QUANTIZATION_ENCODING_UNDEFINED",
                         "scaleOffset": qp["scale_offset"]}}}


def context_utility():
    p = Parser(prog=TOOL)
    # [SDK tools.txt:6112-6131; qd cache_module.py:278-280]
    p.add_argument("--context_binary", required=True)
    p.add_argument("--json_file", required=True)
    a = p.parse_args()
    head = _load_ctx(a.context_binary)
    tensors = sorted(head["lib"]["net"]["graph"]["tensors"].items(), key=lambda x: x[1]["id"])
    graph = {"info": {"graphName": head["graph"],
                      "graphInputs": [_tensor_info(n, t) for n, t in tensors if t["type"] == 0],
                      "graphOutputs": [_tensor_info(n, t) for n, t in tensors if t["type"] == 1],
                      "graphBlobInfo": {"info": {"vtcmSize": head["vtcm_mb"], "optimizationLevel": head["O"]}}}}
    # [qd cache_module.py:98-109]: socModel an int at info, dspArch an int at info.contextMetadata.info
    info = {"info": {"backendId": 6, "buildId": head["build_id"], "coreApiVersion": "2.x",
                     "contextBlobSize": Path(a.context_binary).stat().st_size, "socModel": head["soc_model"],
                     "contextMetadata": {"info": {"dspArch": head["dsp_arch"]}}, "graphs": [graph]}}
    Path(a.json_file).write_text(json.dumps(info, indent=1))


def net_run():
    import numpy as np
    import onnxruntime as ort

    p = Parser(prog=TOOL)
    # [SDK tools.txt:2337-2480; qd config_cli_args.py:111-160]
    p.add_argument("--backend", required=True)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--retrieve_context")
    g.add_argument("--model")
    p.add_argument("--input_list", required=True)
    p.add_argument("--output_dir", default="./output")
    p.add_argument("--use_native_input_files", action="store_true")
    p.add_argument("--use_native_output_files", action="store_true")
    p.add_argument("--profiling_level", choices=["basic", "detailed", "backend"])
    a = p.parse_args()
    if not a.retrieve_context:
        fail("this stand-in runs context binaries only: pass --retrieve_context")
    head = _load_ctx(a.retrieve_context)
    _check_backend(a.backend, head)
    lib = head["lib"]
    model_bytes = base64.b64decode(lib["onnx"])
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    specs = {i.name: i for i in sess.get_inputs()}
    tensors = lib["net"]["graph"]["tensors"]
    # [SDK tools.txt:2541-2553] named entries `name:=path`; positional lists too [docs tutorial2.txt:495-498]
    lines = [ln.split() for ln in Path(a.input_list).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    if os.environ.get("FAKE_QAIRT_RUN_LOG"):  # test observation, not a behaviour of the tool: inputs per process
        with open(os.environ["FAKE_QAIRT_RUN_LOG"], "a") as log:
            log.write(f"{len(lines)}\n")
    for i, line in enumerate(lines):
        if len(line) != len(lib["inputs"]):
            fail(f"input list line {i + 1} has {len(line)} entries, the graph has {len(lib['inputs'])} inputs")
        feeds = {}
        for name, entry in zip(lib["inputs"], line):
            qname, _, path = entry.rpartition(":=")
            if qname and qname != sanitize(name):
                fail(f"input list names tensor {qname}, the graph's input is {sanitize(name)}")
            t = tensors[sanitize(name)]
            dtype = NAMES[t["data_type"]]
            # [SDK examples/QNN/SampleApp/src/Utils/IOTensor.cpp:178-225] files fill the graph tensor as it
            # is in the binary (its dims, no transpose); native files in its dtype, others float32
            # converted by copyFromFloatToNative (:63-165, no FLOAT_16 case)
            if a.use_native_input_files:
                raw = np.fromfile(path, dtype=NP[dtype])
            else:
                if dtype == "QNN_DATATYPE_FLOAT_16":
                    fail(f"{path}: float input files cannot fill the FLOAT_16 tensor {sanitize(name)}: "
                         "pass --use_native_input_files")
                raw = np.fromfile(path, dtype=np.float32)
            if raw.size != int(np.prod(t["dims"])):
                fail(f"{path}: {raw.size} values, tensor {sanitize(name)} holds {int(np.prod(t['dims']))}")
            x = raw.reshape(t["dims"])
            qp = t["quant_params"]
            if qp["definition"] == 1:
                so = qp["scale_offset"]
                # [ORT:144, sh csrc/qnn/utils.cc:165-176] value = (q + offset) * scale
                x = ((x.astype(np.float64) + so["offset"]) * so["scale"]) if a.use_native_input_files else x
            perm = _perm(t["src_axis_format"], t["axis_format"])
            if perm:
                x = np.transpose(x, _inverse(perm))
            feeds[name] = np.ascontiguousarray(x).astype(
                {"tensor(float)": np.float32, "tensor(int32)": np.int32, "tensor(int64)": np.int64,
                 "tensor(bool)": np.bool_}[specs[name].type])
        outs = sess.run(None, feeds)
        d = Path(a.output_dir) / f"Result_{i}"
        d.mkdir(parents=True, exist_ok=True)
        for name, value in zip(lib["outputs"], outs):
            t = tensors[sanitize(name)]
            v = np.asarray(value, dtype=np.float32)
            perm = _perm(t["src_axis_format"], t["axis_format"])
            if perm:
                v = np.transpose(v, perm)
            qp = t["quant_params"]
            if qp["definition"] == 1:
                so = qp["scale_offset"]
                bits = 16 if "16" in NAMES[t["data_type"]] else 8
                q = np.clip(np.round(v / so["scale"]) - so["offset"], 0, 2 ** bits - 1)
                v = ((q + so["offset"]) * so["scale"]).astype(np.float32)
            elif lib["precision"] == "fp16" or NAMES[t["data_type"]] == "QNN_DATATYPE_FLOAT_16":
                v = v.astype(np.float16).astype(np.float32)
            if os.environ.get("FAKE_QAIRT_WRONG"):  # test fault injection, not a behaviour: a wrong answer
                v = (v[::-1] if v.ndim == 1 else np.flip(v, -1)).astype(np.float32) * -1
            # [SDK IOTensor.cpp:711-770] Result_<i>/<sanitized name>.raw, float32 unless native output
            v = np.ascontiguousarray(v)
            if a.use_native_output_files and qp["definition"] == 1:
                q.astype(NP[NAMES[t["data_type"]]]).tofile(d / f"{sanitize(name)}.raw")
            else:
                v.tofile(d / f"{sanitize(name)}.raw")
    if a.profiling_level:  # [LiteRT QNN doc; qnn-net-run --help]: the log goes into the output folder
        _write_profile(Path(a.output_dir) / "qnn-profiling-data_0.log", lib, len(lines))
    print(f"[ INFO ] ran {len(lines)} inputs on the HTP simulator stand-in")


def _write_profile(path, lib, runs):
    """Stand-in timings (µs), deterministic: FAKE_QNN_EXEC_US per inference (default 1500), init 40 ms. The real
    log is binary; only qnn-profile-viewer reads it, and this fake's viewer reads this one."""
    base = int(os.environ.get("FAKE_QNN_EXEC_US", "1500"))
    times = [base + 10 * (i % 3) for i in range(max(runs, 1))]
    path.write_text(json.dumps({"graph": lib.get("graph", "graph"), "init_us": 40000, "finalize_us": 9000,
                                "execute_us": times}))


def profile_viewer():
    """``qnn-profile-viewer --input_log F`` prints the stats as text: "Init Stats:", "Finalize Stats:", "Execute
    Stats (Average|Min|Max):" blocks, each with ``NetRun:  <n> us`` [the form QNN users' tutorials show and their
    parsers read; e.g. a CSDN QNN tutorial's viewer output: "Execute Stats (Average): ... NetRun:  2952 us"]."""
    p = Parser(prog=TOOL)
    p.add_argument("--input_log", required=True)
    a = p.parse_args()
    try:
        d = json.loads(Path(a.input_log).read_text())
    except (OSError, ValueError):
        fail(f"{a.input_log}: not a profiling log")
    ex = d["execute_us"]
    print(f"Input Log File Location: {a.input_log}\nLog File Created: fake\n\nQnn Init/Prepare/Finalize/De-Init/"
          "Execute/Lib-Load Statistics:\n------------------------------------------------------------")
    print(f"Init Stats:\n-----------\n    NetRun: {d['init_us']} us\n")
    print(f"Finalize Stats:\n---------------\nGraph 0 ({d['graph']}):\n    NetRun: {d['finalize_us']} us\n")
    for label, v in (("Average", sum(ex) // len(ex)), ("Min", min(ex)), ("Max", max(ex))):
        print(f"Execute Stats ({label}):\n------------------------\nTotal Inference Time:\n---------------------\n"
              f"Graph 0 ({d['graph']}):\n    NetRun: {v} us\n    Backend (Accelerator (execute) time): "
              f"{int(v * 0.8)} us\n")
    print(f"Execute Stats (Overall):\n------------------------\n    NetRun IPS: {1e6 / (sum(ex) / len(ex)):.4f} "
          "inf/sec")


# Test fault injection, not a behaviour of the real tools: FAKE_QAIRT_FAIL=<tool name> makes that tool fail.
if os.environ.get("FAKE_QAIRT_FAIL") == TOOL:
    fail("injected failure (FAKE_QAIRT_FAIL)")

{"qnn-onnx-converter": converter, "qnn-model-lib-generator": lib_generator,
 "qnn-context-binary-generator": context_generator, "qnn-context-binary-utility": context_utility,
 "qnn-net-run": net_run, "qnn-profile-viewer": profile_viewer}.get(TOOL, lambda: fail("unknown tool"))()
