"""Chips that share a soc_model get the same archive from `fetch` (the release has one build per soc_model)."""

from pathlib import Path

from ci_tools.release.fetch import fetch_model
from ci_tools.release.github import Connection
from tests.test_publish_fetch import REPO, TAG, _publish, gh, release  # noqa: F401 (fixtures)


def test_a_chip_that_builds_as_another_gets_its_archive(gh, release, tmp_path):  # noqa: F811
    _publish(gh, release)
    # QCS8750 (Dragonwing Q-8750) has SM8750's soc_model 69: the release's SM8750 archive is its build
    res = fetch_model(f"{REPO}@{TAG}", "vad", soc="qualcomm-dragonwing-q-8750", dest=tmp_path / "a",
                      via=Connection(api_url=gh.url))
    same = fetch_model(f"{REPO}@{TAG}", "vad", soc="soc_id:639", dest=tmp_path / "b", via=Connection(api_url=gh.url))
    assert res.soc == same.soc == "SM8750" and res.archive == same.archive
    assert (Path(res.path) / "vad_ctx_qnn.bin").read_bytes() == (Path(same.path) / "vad_ctx_qnn.bin").read_bytes()
