"""An export's key holds what its command runs, by content (issue #34, item 3)."""

from __future__ import annotations

from ci_tools.builder.exports import command_digest


def test_a_script_a_config_and_a_module_are_keyed_by_their_bytes(tmp_path):
    (tmp_path / "scripts").mkdir()
    script, config = tmp_path / "scripts" / "export.py", tmp_path / "export.yaml"
    script.write_text("print('v1')\n")
    config.write_text("scale: 1\n")
    argv = ["python", "scripts/export.py", "--config", str(config), "{src}/model.bin", "{out}"]
    first = command_digest(argv, tmp_path)
    assert command_digest(argv, tmp_path) == first
    script.write_text("print('v2')\n")
    second = command_digest(argv, tmp_path)
    config.write_text("scale: 2\n")  # an absolute path counts too
    assert len({first, second, command_digest(argv, tmp_path)}) == 3
    # a module run with -m: the file Python runs (here one of the package's own)
    module = ["python", "-m", "ci_tools.recipes.whisper.export", "{src}", "{out}"]
    assert command_digest(module, tmp_path) != command_digest(["python", "-m", "json.tool"], tmp_path)
    # {src} and {out} are the inputs and the output, keyed elsewhere (the sources' sha256): not read here
    assert command_digest(["python", "{src}/does-not-matter.py"], tmp_path) == command_digest(["python"], tmp_path)

