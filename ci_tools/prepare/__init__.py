"""One graph, made ready for QNN once per graph (chip-independent): static shapes, the declared fixes and
rewrites, the fp16 range check, and quantization for w8a16/int8, each checked on ONNX Runtime's CPU."""
