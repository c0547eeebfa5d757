"""The Whisper recipe: checkpoints (CTranslate2, safetensors) -> encoder and decoder graphs -> text.

``export`` writes the graphs; ``runtime`` is the reference decoder (also shipped in archives as
``transcribe.py``); ``check`` verifies a compiled chip by what it transcribes.
"""
