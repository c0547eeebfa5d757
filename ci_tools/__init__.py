"""qnn-release: compile ONNX graphs into QNN HTP context binaries for every Snapdragon chip, and release them."""

__version__ = "0.1.0"
