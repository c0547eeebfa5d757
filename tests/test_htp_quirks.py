"""HTP's special values, probed on the emulator: the table in ci_tools/htp_quirks.py is what the hints and
prepare's rewrites rest on, so a QNN release that changes one of them must fail here, naming the probe."""

from __future__ import annotations

import pytest

from ci_tools.htp_quirks import PROBES, run_probe, same

pytest.importorskip("onnxruntime_qnn")


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_htp_gives_what_the_table_says(probe):
    from ci_tools import qnn_ep

    got = run_probe(probe, soc_model=69, htp_arch=79)  # SM8750
    assert same(got, probe.htp), (f"{probe.describe()}: QNN {qnn_ep.qnn_version()} gives {got!r} (seen on "
                                  f"{probe.seen_on}): update the table and what rests on it")
