"""The reference pages (docs/reference/) are what the code says: a flag, an exit code or a matrix key that
changes without `qnn-release docs` fails here, and the README stays a front page."""

from __future__ import annotations

from pathlib import Path

from ci_tools.cli import reference

REPO = Path(__file__).resolve().parent.parent.parent


def test_the_committed_reference_pages_are_current():
    from ci_tools.cli.app import build_parser

    assert not reference.stale(build_parser), "run `qnn-release docs`"


def test_a_new_flag_makes_the_cli_page_stale(tmp_path):
    from ci_tools.cli.app import build_parser

    reference.write(build_parser, tmp_path)
    assert not reference.stale(build_parser, tmp_path)

    def with_a_new_flag():
        parser = build_parser()
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        sub.choices["build"].add_argument("--turbo", action="store_true", help="a flag nobody documented")
        return parser

    assert reference.stale(with_a_new_flag, tmp_path) == [tmp_path / "cli.md"]
    reference.write(with_a_new_flag, tmp_path)
    assert "`--turbo`" in (tmp_path / "cli.md").read_text()


def test_every_exit_code_is_on_its_page():
    from ci_tools import errors

    page = reference.exit_codes_page()
    for cls in (errors.ConfigError, errors.NoBuildForChip, errors.SourceError, errors.BuildFailed,
                errors.BackendUnavailable):
        assert f"| {cls.exit_code} | `{cls.__name__}` |" in page
    assert "| 70 | internal error |" in page and "| 130 | interrupted |" in page


def test_the_readme_is_a_front_page_that_points_each_reader_somewhere():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for page in ("app-developers", "release-engineers", "model-authors", "contributors"):
        assert f"docs/{page}.md" in readme and (REPO / "docs" / f"{page}.md").is_file()
    # the two commands a newcomer needs, as CI reads the second
    assert "qnn-release build" in readme and "python -m pytest -n 2" in readme


def test_the_pages_are_the_same_on_every_checkout():
    """CI checks the pages out elsewhere: a default that is a path is shown relative to the repository or home."""
    import re

    from ci_tools.paths import REPO_ROOT

    assert reference._default(REPO_ROOT) == "<repository>"
    assert reference._default(REPO_ROOT / "dist") == "<repository>/dist"
    assert reference._default(Path.home() / ".cache" / "qnn-release") == "~/.cache/qnn-release"
    for page in (REPO / "docs" / "reference").glob("*.md"):
        absolute = re.findall(r"default `(/[^`]*)`", page.read_text())
        assert not absolute, f"{page.name}: machine paths {absolute}"


def test_the_pages_do_not_depend_on_the_environment_or_the_working_folder(monkeypatch, tmp_path):
    """GitHub Actions sets GITHUB_REPOSITORY, the SDK image QNN_SDK_ROOT; both are defaults of some flags."""
    from ci_tools.cli.app import build_parser

    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/models")
    monkeypatch.setenv("QNN_SDK_ROOT", "/opt/qairt/2.40.0.251030")
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.chdir(tmp_path)
    assert not reference.stale(build_parser)


def test_the_prose_names_every_recipe_and_matrix(tmp_path):
    """#45 item 6: a recipe or a model matrix the hand-written docs leave out fails `docs --check`, naming the
    file and what is missing; the committed docs name them all."""
    import shutil

    from ci_tools.cli.reference import PROSE, prose_gaps

    assert prose_gaps() == []
    for f in {f for fs in PROSE.values() for f in fs}:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / f, tmp_path / f)
    shutil.copytree(REPO / "matrix", tmp_path / "matrix")
    (tmp_path / "matrix" / "asr.yaml").write_text("version: 1\nmodels: []\n")
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("Piper", "VITS").replace("piper/", "vits/"))
    assert prose_gaps(tmp_path) == ["README.md: the recipe piper (ci_tools/recipes/piper/) is not named",
                                    "docs/model-authors.md: the matrix matrix/asr.yaml is not named"]
