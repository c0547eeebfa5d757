"""Where the repository's own data lives (the package is installed editable from the repo)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = REPO_ROOT / "templates"
