"""Guards a release toolkit is trusted for, each with a test that fails when the guard is removed

The unit tier of tests/test_guards.py: no subprocess, no network, no compile (tests/unit/conftest.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ci_tools.prepare.graph import run_cpu
from tests.support import models
from tests.support.guards import _prepared


def test_an_int64_input_passed_straight_through_gets_an_identity(tmp_path):
    """prepare: an int64 input that is also a graph output keeps its values, through an Identity."""
    (tmp_path / "models").mkdir()
    t = numpy_helper.from_array(np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32), "t")
    g = helper.make_graph([helper.make_node("Gather", ["t", "ids"], ["e"], name="embed")], "pass",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
                          [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 3, 4]),
                           helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])], [t])
    f = models.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "models" / "p.onnx")
    _, _, prep = _prepared(tmp_path, f)
    assert [o.name for o in prep.outputs] == ["e", "ids_out"] and prep.outputs[1].dtype == "int32"
    node = next(n for n in onnx.load(str(prep.path)).graph.node if n.op_type == "Identity")
    assert list(node.input) == ["ids"] and list(node.output) == ["ids_out"]
    ids = np.array([[1, 7, 42]], dtype=np.int32)
    (out,) = run_cpu(prep.path, [{"ids": ids}])
    assert np.array_equal(out[1], ids) and np.allclose(out[0], numpy_helper.to_array(t)[ids[0]][None])


def test_the_target_key_changes_with_the_chip(tmp_path):
    """Each chip's binary is cached under its own key: a build for one chip never serves another."""
    from ci_tools.builder.keys import target_key
    from ci_tools.matrix.plan import plan

    (tmp_path / "models").mkdir()
    loaded, _, prep = _prepared(tmp_path, models.mlp(tmp_path / "models" / "m.onnx", dynamic_batch=False),
                                chips=["SM8750", "SM8650", "QCS9100"])
    keys = {t.soc.name: target_key(t, prep, "ort", "2.51", None) for t in plan(loaded)}
    assert len(set(keys.values())) == 3


@pytest.mark.parametrize("members,refusal", [
    # each refused by its own check, named in the message: the '..' name check (not only the later resolution
    # through links, which says "through a link"), a link leaving the tree, an absolute path
    ([("top", "dir"), ("top/../evil.txt", "file")], r"'top/../evil.txt' points outside the destination \(hint"),
    ([("top", "dir"), ("top/up", "symlink:.."), ("top/up/evil.txt", "file")], r"link 'top/up' -> '\.\.' points"),
    ([("top", "dir"), ("/etc/evil.txt", "file")], r"has an absolute path"),
])
def test_each_extraction_check_refuses_on_its_own(tmp_path, members, refusal, monkeypatch):
    import io
    import tarfile

    from ci_tools.errors import PackageError
    from ci_tools.release.extract import check_archive

    monkeypatch.delattr(tarfile, "data_filter", raising=False)  # no stdlib filter behind our checks
    path = tmp_path / "top.tar"
    with tarfile.open(path, "w") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind.startswith("symlink:"):
                info.type, info.linkname = tarfile.SYMTYPE, kind.split(":", 1)[1]
                tar.addfile(info)
            else:
                info.size = 4
                tar.addfile(info, io.BytesIO(b"evil"))
    with pytest.raises(PackageError, match=refusal):
        check_archive(path, "top")
