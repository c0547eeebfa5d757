"""#43 item 2: the tool as a wheel a pin can reach. The wheel carries the package's data (templates, chip catalog,
demo matrix, the SDK image's Dockerfile) as files, and, installed alone, adopts a new repository exactly as this
checkout does: the same matrix and the same workflows, byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO

PIN = "acme/qnn-release@" + "1" * 40


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheelhouse")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check",
                        "-w", str(out), str(REPO)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "Could not find a version that satisfies the requirement setuptools" in r.stderr:
        pytest.skip("no package registry to build the wheel with (setuptools)")
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("qnn_release-*.whl")
    return whl


def _adopt(python_path: str | None, root) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if python_path:
        env["PYTHONPATH"] = python_path  # before site-packages: this copy of ci_tools, not the editable checkout
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    code = ("import sys, ci_tools; print(ci_tools.__file__, file=sys.stderr); from ci_tools.cli.app import main; "
            "raise SystemExit(main())")
    steps = [["init", "--tool", PIN], ["render", "--check"], ["socs", "--resolve", "sm8750-ac"]]
    for argv in steps:
        r = subprocess.run([sys.executable, "-c", code, *argv], cwd=root, env=env, capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            return r
    return r


def test_the_wheel_carries_its_data_and_adopts_a_repository_as_the_checkout_does(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for must in ("ci_tools/_data/templates/workflows/release.yaml.j2", "ci_tools/_data/matrix/socs.yaml",
                     "ci_tools/_data/matrix/models.yaml", "ci_tools/_data/Dockerfile-2.40",
                     "ci_tools/schemas/manifest.schema.json", "ci_tools/_data/templates/clients/qnn-fetch.sh.j2"):
            assert must in names, must
            assert z.getinfo(must).external_attr >> 28 != 0o12, f"{must} is a link in the wheel"  # a file
        assert not any(n.startswith(("tests/", "docs/", "clips/")) for n in names)
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--disable-pip-version-check",
                        "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    from_wheel = _adopt(str(site), tmp_path / "from-wheel")
    assert from_wheel.returncode == 0, from_wheel.stdout + from_wheel.stderr
    assert str(site) in from_wheel.stderr.splitlines()[0]  # the wheel's ci_tools ran, not the checkout's
    assert from_wheel.stdout.strip().splitlines()[-1].startswith("sm8750-ac -> SM8750 ")
    from_checkout = _adopt(None, tmp_path / "from-checkout")
    assert from_checkout.returncode == 0, from_checkout.stderr

    def tree(root):
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and ".git" not in p.relative_to(root).parts}

    got, want = tree(tmp_path / "from-wheel"), tree(tmp_path / "from-checkout")
    assert sorted(got) == sorted(want) and got == want
    assert ".github/workflows/release.yaml" in got and "matrix/models.yaml" in got
    assert ".github/workflows/tool-release.yaml" not in got  # an adopter pins the tool; it does not release it
