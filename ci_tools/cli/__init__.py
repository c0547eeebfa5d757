"""The ``qnn-release`` command: ``app`` parses and dispatches; the command families live beside it."""

from .app import main

__all__ = ["main"]
