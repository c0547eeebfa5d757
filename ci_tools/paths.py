"""Where the tool's data lives.

``ci_tools/_data/`` holds what the tool reads besides its code: the templates, the chip catalog and the demo matrix
(``matrix/``), the SDK image's Dockerfile. In this repository those are links to ``templates/``, ``matrix/`` and
``Dockerfile-2.40`` (the repository is also a user of itself); an installed wheel carries copies. ``REPO_ROOT`` is
the repository of a checkout: its own docs and git history, never needed by a user of the wheel.
"""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
DATA = PACKAGE / "_data"
REPO_ROOT = PACKAGE.parent
# a checkout of qnn-release (its own git history), not a wheel in site-packages: git run from site-packages would
# answer for whatever repository the environment happens to sit in
CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "templates").is_dir()
TEMPLATES = DATA / "templates"
MATRIX_DATA = DATA / "matrix"
