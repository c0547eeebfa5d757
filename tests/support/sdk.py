"""What tests/test_sdk.py and tests/unit/test_sdk.py share."""

from __future__ import annotations

VERSION = "2.40.0.251030"


REPO_ID = "csukuangfj/qnn-toolkit"


FLOW = f"""version: 1
sdk:
  # the SDK
  qairt: [{{version: {VERSION}, hf_repo: {REPO_ID}, file: v{VERSION}.zip}}]  # flow style, no pins yet
  onnxruntime_qnn: 2.7.0
"""


BLOCK = f"""version: 1
sdk:
  qairt:
    - version: {VERSION}   # the default
      hf_repo: {REPO_ID}
      file: v{VERSION}.zip
      revision:
  onnxruntime_qnn: 2.7.0  # last
"""
