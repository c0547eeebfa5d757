"""Sub-commands of the compile stage (filled by the compile issue)."""


def register(sub, matrix_arg) -> None:
    return None
