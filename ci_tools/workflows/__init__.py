"""The GitHub Actions workflows, rendered from the matrix and ``templates/workflows``."""
