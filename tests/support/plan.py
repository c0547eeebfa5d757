"""What tests/test_plan.py and tests/unit/test_plan.py share."""



V85_MODEL = {"name": "tiny", "description": "x", "license": "MIT", "graphs": [{"name": "g", "file": "m.onnx"}],
             "precisions": ["w8a16"], "chips": ["SM8975", "SM8750"],
             "source": {"kind": "path", "path": "m.onnx", "sha256": "0" * 64}}
