"""The matrix file: its typed schema and loading with line numbers, and the plan of targets it expands to."""
