"""Run alone by any Python with onnxruntime-qnn (no qnn-release): compile an ONNX model into an HTP context binary,
or load one and run it, on the HTP emulator. Used with two real SDK lines, each in its own venv, to measure which
runtime loads which binary (tests/test_runtime_rule.py).

    python qnn_runtime_probe.py compile MODEL.onnx OUT_DIR SOC_MODEL HTP_ARCH   -> prints the QNN version
    python qnn_runtime_probe.py load CTX.onnx                                   -> prints "loaded" or the error
"""

import sys

import numpy as np
import onnxruntime as ort
import onnxruntime_qnn


def session_options(options: dict, context: str | None = None) -> "ort.SessionOptions":
    if not any(d.ep_name == "QNNExecutionProvider" for d in ort.get_ep_devices()):
        ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if context:
        so.add_session_config_entry("ep.context_enable", "1")
        so.add_session_config_entry("ep.context_file_path", context)
    so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"], options)
    return so


def main() -> int:
    ort.set_default_logger_severity(4)
    if sys.argv[1] == "compile":
        model, out, soc_model, arch = sys.argv[2:6]
        options = {"backend_type": "htp", "soc_model": soc_model, "htp_arch": arch, "enable_htp_fp16_precision": "1"}
        ort.InferenceSession(model, sess_options=session_options(options, f"{out}/main_ctx.onnx"))
        print(onnxruntime_qnn.build_and_package_info.qnn_version)
        return 0
    try:
        sess = ort.InferenceSession(sys.argv[2], sess_options=session_options({"backend_type": "htp"}))
        feeds = {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
                 for i in sess.get_inputs()}
        sess.run(None, feeds)
    except Exception as e:  # the runtime's own words, one line
        print("refused: " + " ".join(str(e).split())[:300])
        return 1
    print("loaded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
