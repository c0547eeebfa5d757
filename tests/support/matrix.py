"""What tests/test_matrix.py and tests/unit/test_matrix.py share."""

from tests.conftest import DEMO_MATRIX

SRC = DEMO_MATRIX.read_text()


VAD_TAIL = "    precisions: [fp16]\n    chips: [flagship, QCS9100]\n\n  - name: rapidocr"
