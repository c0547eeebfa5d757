"""Helpers every stage uses: atomic file writes, text tables, quiet native output, YAML with line numbers,
schema errors as one line, parity metrics. Nothing here imports a stage."""
