"""Numbers from real phones: each built target run on a device of its chip (Qualcomm AI Hub, or a phone on
adb), with latency, memory, op placement and on-device parity against ONNX Runtime on CPU."""
